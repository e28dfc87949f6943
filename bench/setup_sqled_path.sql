-- Run by the owner after the SQL edition's install: the same functions
-- pinned to a search_path, the way SECURITY DEFINER functions are usually
-- made safe, against the edition's qualified names (one SECURITY DEFINER
-- function per call of the runs).
ALTER FUNCTION rl_take(text, text, double precision, integer, integer) SET search_path = public, pg_catalog;
