-- Sealed API key rows (issue 32 item 5): an HMAC of key_id, key_hash and role under a
-- chain key of the integrity key file, `<key id>:<hex>`; a row without a valid one is
-- refused at authentication (see src/infra/auth.rs). The process that applies this
-- migration seals the rows that exist now.
ALTER TABLE api_keys ADD COLUMN mac VARCHAR(128) NULL;
