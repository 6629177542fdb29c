-- name: scored_samples
-- description: Every scored answer with its task's facts, one row per (model, label, task, sample): what the report computes pass@1 with intervals, coverage precision/recall, REval's consistency and paired comparisons from (as steptrace score does).
-- param: model str = '' (only this model; empty for every model)
-- requires: predictions(task_id, model, label, sample_index, parsed, error): run steptrace predict first
-- requires: tasks(task_id, kind, run_id, line, var, occurrence, answer, line_steps, loop_nesting): run steptrace tasks first
-- requires: scores(task_id, model, label, sample_index, correct): run steptrace score first
-- Predictions whose request failed (error not NULL) and predictions without a scores row
-- are left out, as steptrace score leaves them out of its tables.
SELECT p.model,
       p.label,
       p.task_id,
       p.sample_index,
       t.kind,
       t.run_id,
       t.line,
       t.var,
       t.occurrence,
       t.answer,
       t.line_steps,
       t.loop_nesting,
       p.parsed,
       s.correct
FROM predictions p
JOIN scores s USING (task_id, model, label, sample_index)
JOIN tasks t USING (task_id)
WHERE p.error IS NULL AND s.correct IS NOT NULL AND ($model = '' OR p.model = $model)
ORDER BY p.model, p.label, p.task_id, p.sample_index;
