# describe_extension(NAME): a query that describes every object of the
# extension NAME from the catalogs, in a form that does not depend on OIDs:
# functions with their attributes and grants, types, relations with their
# columns, constraints, indexes, triggers and views, and the rest by name.
# Two databases whose answers are equal have the same extension.
# describe_schema(NAME): the same description of every function, type and
# relation in schema NAME (an installation that is no extension).
package ExtensionObjects;
use strict;
use warnings;
use Exporter 'import';
our @EXPORT = qw(describe_extension describe_schema);

sub describe_extension
{
	my ($name) = @_;
	die "bad extension name $name" unless $name =~ /\A\w+\z/;
	return describe(q{
	SELECT classid, objid FROM pg_depend
	WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
	  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'EXTNAME')
}, $name);
}

# the objects a CREATE EXTENSION would make members: no array types, row
# types of tables, indexes or TOAST tables
sub describe_schema
{
	my ($name) = @_;
	die "bad schema name $name" unless $name =~ /\A\w+\z/;
	(my $members = q{
	SELECT 'pg_proc'::regclass, oid FROM pg_proc WHERE pronamespace = 'SCHEMA'::regnamespace
	UNION ALL
	SELECT 'pg_type'::regclass, t.oid FROM pg_type t
	WHERE t.typnamespace = 'SCHEMA'::regnamespace
	  AND NOT EXISTS (SELECT FROM pg_type e WHERE e.typarray = t.oid)
	  AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
	UNION ALL
	SELECT 'pg_class'::regclass, oid FROM pg_class
	WHERE relnamespace = 'SCHEMA'::regnamespace AND relkind NOT IN ('i', 'I', 't', 'c')
}) =~ s/SCHEMA/$name/g;
	# no extension has an empty name: nothing is dumped as its configuration
	return describe($members, '');
}

# describe(MEMBERS, EXTNAME): the description of the objects the query
# MEMBERS answers (classid, objid), those of EXTNAME's configuration dumped
sub describe
{
	my ($members, $extname) = @_;
	my $query = q{
WITH members (classid, objid) AS (MEMBERS)
SELECT format('function %s returns %s args %s kind %s volatile %s strict %s parallel %s'
	' secdef %s leakproof %s lang %s src %s bin %s config %s acl %s',
	p.oid::regprocedure, pg_get_function_result(p.oid), pg_get_function_arguments(p.oid),
	p.prokind, p.provolatile, p.proisstrict, p.proparallel, p.prosecdef, p.proleakproof,
	(SELECT lanname FROM pg_language WHERE oid = p.prolang), p.prosrc, p.probin,
	p.proconfig, p.proacl)
FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
UNION ALL
SELECT 'type ' || t.oid::regtype::text || ' ' || t.typtype::text
	|| coalesce(' (' || (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
				  FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped) || ')', '')
FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
UNION ALL
SELECT 'relation ' || c.oid::regclass::text || ' kind ' || c.relkind::text
	|| ' persistence ' || c.relpersistence::text || ' acl ' || coalesce(c.relacl::text, '-')
	|| ' columns (' || coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		|| coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
		|| coalesce(' acl ' || a.attacl::text, ''), ', ' ORDER BY a.attnum)
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '') || ')'
	|| ' constraints (' || coalesce((SELECT string_agg(pg_get_constraintdef(k.oid), ', ' ORDER BY pg_get_constraintdef(k.oid))
		FROM pg_constraint k WHERE k.conrelid = c.oid), '') || ')'
	|| ' indexes (' || coalesce((SELECT string_agg(pg_get_indexdef(i.indexrelid), ', ' ORDER BY pg_get_indexdef(i.indexrelid))
		FROM pg_index i WHERE i.indrelid = c.oid), '') || ')'
	|| ' triggers (' || coalesce((SELECT string_agg(pg_get_triggerdef(g.oid), ', ' ORDER BY g.tgname)
		FROM pg_trigger g WHERE g.tgrelid = c.oid), '') || ')'
	|| coalesce(' view ' || pg_get_viewdef(c.oid), '')
	|| ' dumped ' || coalesce(c.oid = ANY ((SELECT extconfig FROM pg_extension WHERE extname = 'EXTNAME')::oid[]), false)::text
FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
UNION ALL
SELECT 'other ' || pg_describe_object(m.classid, m.objid, 0)
FROM members m
WHERE m.classid NOT IN ('pg_proc'::regclass, 'pg_type'::regclass, 'pg_class'::regclass)
ORDER BY 1
};
	$query =~ s/MEMBERS/$members/;
	$query =~ s/EXTNAME/$extname/g;
	return $query;
}

1;
