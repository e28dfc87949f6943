-- table store only: a decision of the table store is transactional.

-- Inside a transaction block the decision rolls back with it (warned once)
BEGIN;
SELECT allowed FROM rl_take('trap', 'k', 1.0 / 3600, 1);
SELECT allowed FROM rl_take('trap', 'k', 1.0 / 3600, 1);
ROLLBACK;
SELECT allowed FROM rl_take('trap', 'k', 1.0 / 3600, 1);
SET ratelimit.in_transaction = error;
BEGIN;
SELECT allowed FROM rl_take('trap', 'k', 1.0 / 3600, 1);
ROLLBACK;
SET ratelimit.in_transaction = allow;
BEGIN;
SELECT allowed FROM rl_take('trap', 'k', 1.0 / 3600, 1);
COMMIT;
-- a peek neither writes nor locks, so it is no trap; a query string of several
-- statements is one transaction, so it is
SET ratelimit.in_transaction = error;
BEGIN;
SELECT allowed, remaining FROM rl_take('trap', 'k', 1.0 / 3600, 1, 0);
COMMIT;
SELECT allowed FROM rl_take('implicit', 'k', 1.0 / 3600, 1) \; SELECT 1 AS next;
SET ratelimit.in_transaction = sometimes;
RESET ratelimit.in_transaction;
SHOW ratelimit.in_transaction;
