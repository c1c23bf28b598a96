-- deepcli state, migration 15: what a person deciding an approval is shown, and `allow_always` rules match the exact title (approvals.md, "Rules"). A rule made
-- by `approve --always` used to read its title as a pattern, so a `*` the agent put in the title
-- matched any text; now a rule is `exact` unless the operator wrote a pattern on purpose
-- (`--pattern`), and is bound to the shape of the tool's raw input. Rules made before are kept
-- as `exact` with no input shape: they match only the very title, of a request with no raw input.

ALTER TABLE approval_rules ADD COLUMN title_match TEXT NOT NULL DEFAULT 'exact';  -- exact | pattern
-- The raw input's shape, JSON (keys and value types, no values); NULL: the request had none.
ALTER TABLE approval_rules ADD COLUMN input_shape TEXT;

-- A management request's preview (approvals.md, "Management requests"): the management
-- service's dry run when it was asked (files, unified diff, or why none) and what it touches
-- beyond the requesting agent, as JSON. NULL for permission requests and older rows.
ALTER TABLE approvals ADD COLUMN preview TEXT;
