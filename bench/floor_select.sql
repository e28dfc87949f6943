\set k random(1, 100000)
SELECT v FROM floor_row WHERE k = :k;
