\set k random(1, 100000)
UPDATE floor_row_logged SET v = v + 1 WHERE k = :k;
