-- Idempotency keys scoped per caller (issue 14 F6, SPEC R-SEC-5), as Stripe scopes
-- them per API key: the same Idempotency-Key from two callers names two commands.
-- `scope` is the caller's actor (`key:<api key id>`, or an internal actor's name).
--
-- Rows written before this migration get the actor of their first event, which is
-- the caller that sent the command, so a retry by that caller still replays. A row
-- whose command wrote no event keeps the empty scope: no caller finds it again (a
-- retry decides afresh, on a state that already has the command's effect).
-- SQLite cannot change a primary key in place: the table is copied.
CREATE TABLE command_log_scoped (
    scope TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    first_position INTEGER NOT NULL,
    last_position INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
);

INSERT INTO command_log_scoped
    (scope, idempotency_key, request_hash, first_position, last_position, created_at)
SELECT COALESCE((SELECT e.actor FROM events e WHERE e.global_position = c.first_position), ''),
       c.idempotency_key, c.request_hash, c.first_position, c.last_position, c.created_at
FROM command_log c;

DROP TABLE command_log;

ALTER TABLE command_log_scoped RENAME TO command_log;
