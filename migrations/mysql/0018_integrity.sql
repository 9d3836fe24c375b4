-- Tamper evidence that a database administrator cannot silently defeat (issue 14).
--
-- hash_key: the id of the HMAC-SHA-256 key the row's hash was sealed with. The keys
-- live outside the database (the integrity key file), so someone with root on the
-- database can neither re-hash an edited event nor forge a new one. '' marks rows
-- sealed before keyed chains (plain SHA-256): they are accepted only as a prefix of
-- the log, before the first keyed row.
ALTER TABLE events ADD COLUMN hash_key VARCHAR(32) NOT NULL DEFAULT '';

-- Signed chain anchors: the log's head position, the hash of the event there and a
-- running digest over every (position, hash) up to it, signed with Ed25519. Each is
-- also appended to the anchor file and published to the outbox, outside this
-- database: `verify` compares the log with them, so a deleted tail, a truncated table
-- or a re-chained history is found.
CREATE TABLE chain_anchors (
    anchor_seq BIGINT NOT NULL PRIMARY KEY,
    head_position BIGINT NOT NULL,
    head_hash CHAR(64) NOT NULL,
    chain_digest CHAR(64) NOT NULL,
    signing_key_id VARCHAR(32) NOT NULL,
    signature VARCHAR(128) NOT NULL,
    created_at VARCHAR(32) NOT NULL,
    created_by VARCHAR(128) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
