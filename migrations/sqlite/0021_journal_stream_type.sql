-- Double entry, chart version 2; see migrations/mysql/0021.
ALTER TABLE journal ADD COLUMN stream_type TEXT NOT NULL DEFAULT '';
DELETE FROM journal;
DELETE FROM account_balances;
DELETE FROM journal_stream_currencies;
UPDATE projection_checkpoints
   SET position = 0, version = 2, last_error = NULL, error_position = NULL
 WHERE name = 'journal';
