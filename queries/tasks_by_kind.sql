-- name: tasks_by_kind
-- description: How many tasks of each kind the store holds, over how many runs and programs.
-- requires: tasks(task_id, kind, run_id): run steptrace tasks first
SELECT t.kind,
       count(*)                      AS tasks,
       count(DISTINCT t.run_id)      AS runs,
       count(DISTINCT r.program_id)  AS programs
FROM tasks t
LEFT JOIN runs r USING (run_id)
GROUP BY t.kind
ORDER BY tasks DESC, t.kind;
