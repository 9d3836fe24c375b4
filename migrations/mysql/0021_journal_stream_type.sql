-- Double entry, chart version 2: campaign funds post between budget accounts, and a
-- journal line names the type of the stream that made it (a scoped rebuild of one
-- stream must not touch another type's stream of the same id). The journal's mapping
-- changed, so it is emptied and its checkpoint set back: the runner replays the whole
-- log into it at the next start (nothing else reads these tables).
ALTER TABLE journal ADD COLUMN stream_type VARCHAR(64) NOT NULL DEFAULT '';
DELETE FROM journal;
DELETE FROM account_balances;
DELETE FROM journal_stream_currencies;
UPDATE projection_checkpoints
   SET position = 0, version = 2, last_error = NULL, error_position = NULL
 WHERE name = 'journal';
