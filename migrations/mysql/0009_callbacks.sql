-- The callback inbox (issue 4 item 7; SPEC R-PAY-4, R-CB-1; seed 000 "回调重放"). Every
-- delivery to `POST /v1/callbacks/{provider}` of a configured provider is one row,
-- written BEFORE anything is checked, so even a forged or garbled callback stays on
-- record for audit; verification, normalisation, dedupe and handling then fill in the
-- rest in later statements. Replays read `normalized_payload`, never `raw_body`.
-- Times are UTC epoch milliseconds (`*_ms`).
CREATE TABLE callback_inbox (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    provider VARCHAR(64) NOT NULL,
    -- The provider's event id, set only on the FIRST verified and normalised delivery
    -- of that event: the unique key below is the dedupe (R-PAY-4). Unverified rows
    -- never claim it (a forged callback could otherwise squat on a real event id and
    -- make the genuine delivery look like a duplicate); duplicates point at the owner
    -- through `duplicate_of` instead.
    provider_event_id VARCHAR(128) NULL,
    -- The normalised event type (copied from normalized_payload for lists).
    event_type VARCHAR(128) NULL,
    received_at_ms BIGINT NOT NULL,
    -- JSON object of the request headers that matter (content type, user agent,
    -- request id, the provider's signature header; a token header only as a SHA-256
    -- fingerprint: it is the shared secret itself).
    headers LONGTEXT NOT NULL,
    -- The body exactly as received (bytes, not necessarily UTF-8).
    raw_body LONGBLOB NOT NULL,
    -- 0 not verified yet, 1 verified, 2 verification failed
    verify_status TINYINT NOT NULL,
    verify_error VARCHAR(1000) NULL,
    -- JSON `{event_id, event_type, data}`; NULL when the body could not be normalised
    -- (or was never normalised because it was not verified).
    normalized_payload LONGTEXT NULL,
    normalize_error VARCHAR(1000) NULL,
    -- 0 pending, 1 handled, 2 failed (replayed), 3 not handled because unverified or
    -- unnormalised (never replayed), 4 duplicate of `duplicate_of` (not handled again)
    handle_status TINYINT NOT NULL,
    handle_attempts INT NOT NULL DEFAULT 0,
    -- Truncated to 1,000 characters.
    handle_error VARCHAR(1000) NULL,
    handled_at_ms BIGINT NULL,
    duplicate_of BIGINT NULL,
    updated_at_ms BIGINT NOT NULL,
    UNIQUE KEY uq_callback_inbox_event (provider, provider_event_id),
    -- Lists by status and the replay backstop (handle_status = 2, in id order).
    KEY ix_callback_inbox_handle (handle_status, id),
    KEY ix_callback_inbox_provider (provider, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
