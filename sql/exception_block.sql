-- table store only: the memory store is not transactional, and immune.
-- A PL/pgSQL exception block is a subtransaction: the error it catches rolls
-- back the decision made inside it, even in autocommit.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ratelimit;
RESET client_min_messages;

-- a sign-in that counts the attempt, then fails on a bad password and
-- catches its own error: the catch undoes the count
CREATE FUNCTION sign_in(email text, password_ok boolean) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	IF NOT (rl_take('sign_in', email, 10.0 / 900, 3)).allowed THEN
		RETURN 'too many attempts';
	END IF;
	IF NOT password_ok THEN
		RAISE EXCEPTION 'bad password';
	END IF;
	RETURN 'signed in';
EXCEPTION WHEN raise_exception THEN
	RETURN 'bad password';
END $$;

-- allow: 10 failures are never counted; warn (the default) names the trap once per session; error refuses
SET ratelimit.in_transaction = allow;
SELECT sign_in('ada@example.com', false) FROM generate_series(1, 10);
SELECT remaining FROM rl_take('sign_in', 'ada@example.com', 10.0 / 900, 3, 0);
RESET ratelimit.in_transaction;
SELECT sign_in('ada@example.com', false) FROM generate_series(1, 2);
SET ratelimit.in_transaction = error;
SELECT sign_in('ada@example.com', false);
SELECT remaining FROM rl_take('sign_in', 'ada@example.com', 10.0 / 900, 3, 0);

-- a savepoint rolled back is the same trap
BEGIN;
SAVEPOINT attempt;
SELECT allowed FROM rl_take('sign_in', 'eve@example.com', 10.0 / 900, 3);
ROLLBACK TO SAVEPOINT attempt;
ROLLBACK;

-- the fix: decide outside the block, then check the password inside it
CREATE FUNCTION sign_in_counted(email text, password_ok boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	d rl_decision := rl_take('sign_in', email, 10.0 / 900, 3);
BEGIN
	IF NOT d.allowed THEN
		RETURN 'too many attempts';
	END IF;
	BEGIN
		IF NOT password_ok THEN
			RAISE EXCEPTION 'bad password';
		END IF;
		RETURN 'signed in';
	EXCEPTION WHEN raise_exception THEN
		RETURN 'bad password';
	END;
END $$;
SELECT sign_in_counted('ada@example.com', false) FROM generate_series(1, 4);
SELECT remaining FROM rl_take('sign_in', 'ada@example.com', 10.0 / 900, 3, 0);
RESET ratelimit.in_transaction;
DROP FUNCTION sign_in, sign_in_counted;
SELECT rl_reset('sign_in', 'ada@example.com');
