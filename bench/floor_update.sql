\set k random(1, 100000)
UPDATE floor_row SET v = v + 1 WHERE k = :k;
