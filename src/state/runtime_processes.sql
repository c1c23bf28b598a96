-- deepcli state, migration 4: the processes of a runtime outside its process group (they
-- called `setsid` or `setpgid`), by pid and start time, as the controller last found them, so
-- that the controller after a killed one stops them with the runtime (reconcile.md,
-- "Runtimes"). A JSON array of {"pid", "start"}; NULL when there are none.
ALTER TABLE runtimes ADD COLUMN escaped TEXT;
