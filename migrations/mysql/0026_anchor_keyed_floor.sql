-- Signed anchors name the log's keyed floor: the first position sealed with a chain key
-- (0 when none up to the anchor's head). A log re-sealed as unkeyed "legacy" rows moves
-- its floor and no longer matches what was signed. NULL on anchors signed before.
ALTER TABLE chain_anchors ADD COLUMN keyed_floor BIGINT NULL;
