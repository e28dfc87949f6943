SELECT * FROM plpgsql_take('hot', 'one key', 1000000, 1000000);
