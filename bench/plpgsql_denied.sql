SELECT * FROM plpgsql_take('denied', 'attacker', 0.000001, 1);
