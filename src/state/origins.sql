-- deepcli state, migration 5: who created each of an agent's directories.
--
-- Before, `owns_*` was 1 for every directory, including one that already existed when the agent
-- was first applied (a user's project folder, `/etc`): deleting the agent moved it to trash
-- whole. Now each directory has an origin:
--   created  deepcli made it: deleting the agent moves it to trash whole;
--   adopted  it existed before deepcli's first apply for the agent (at that path): it is never
--            moved, only the files deepcli wrote into it go to trash;
--   unknown  applied before deepcli recorded this: treated as adopted.
-- Rows of older versions start `unknown`; the migration then marks deepcli's default layout
-- under the state directory (`workspaces/<id>`, `agents/<id>/agent`, `agents/<id>/sessions`)
-- `created` (state/mod.rs, `mark_default_layout_created`).

ALTER TABLE agents ADD COLUMN workspace_origin TEXT NOT NULL DEFAULT 'unknown'
    CHECK (workspace_origin IN ('created', 'adopted', 'unknown'));
ALTER TABLE agents ADD COLUMN agent_dir_origin TEXT NOT NULL DEFAULT 'unknown'
    CHECK (agent_dir_origin IN ('created', 'adopted', 'unknown'));
ALTER TABLE agents ADD COLUMN sessions_origin TEXT NOT NULL DEFAULT 'unknown'
    CHECK (sessions_origin IN ('created', 'adopted', 'unknown'));
ALTER TABLE agents DROP COLUMN owns_workspace;
ALTER TABLE agents DROP COLUMN owns_agent_dir;
ALTER TABLE agents DROP COLUMN owns_sessions;
