-- Idempotency keys scoped per caller (issue 14 F6, SPEC R-SEC-5), as Stripe scopes
-- them per API key: the same Idempotency-Key from two callers names two commands.
-- `scope` is the caller's actor (`key:<api key id>`, or an internal actor's name).
--
-- Rows written before this migration get the actor of their first event, which is
-- the caller that sent the command, so a retry by that caller still replays. A row
-- whose command wrote no event keeps the empty scope: no caller finds it again (a
-- retry decides afresh, on a state that already has the command's effect).
ALTER TABLE command_log ADD COLUMN scope VARCHAR(128) NOT NULL DEFAULT '' FIRST;

UPDATE command_log c
JOIN events e ON e.global_position = c.first_position
SET c.scope = e.actor;

ALTER TABLE command_log DROP PRIMARY KEY, ADD PRIMARY KEY (scope, idempotency_key);
