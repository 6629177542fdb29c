-- name: accuracy_by_kind
-- description: Model accuracy (pass@1) by task kind, overall and by difficulty bucket (the line steps of the task's run).
-- param: width int >= 0 = 0 (bucket width in line steps; 0 for power-of-two buckets [2^k, 2^(k+1)))
-- param: model str = '' (only this model; empty for every model)
-- requires: predictions(task_id, model, label, sample_index, parsed, error): run steptrace predict first
-- requires: tasks(task_id, kind, run_id): run steptrace tasks first
-- requires: scores(task_id, model, label, sample_index, correct): run steptrace score first
-- Reads predictions, tasks and scores as accuracy_by_method does, a row set per
-- experiment (model and label: steptrace predict --label). The row of a kind with
-- bucket_from and bucket_to NULL is that kind over all buckets; it comes first. The
-- buckets are [bucket_from, bucket_to), those of steptrace score's "by difficulty" table
-- (engine/scoring/_buckets.py).
WITH per_task AS (
    SELECT p.model, p.label, p.task_id, count(*) AS predictions,
           count(*) FILTER (WHERE NOT p.parsed) AS unparseable,
           count(s.correct) AS scored, avg(s.correct::INTEGER) AS accuracy
    FROM predictions p
    LEFT JOIN scores s USING (task_id, model, label, sample_index)
    WHERE p.error IS NULL AND ($model = '' OR p.model = $model)
    GROUP BY p.model, p.label, p.task_id
),
bucketed AS (
    SELECT pt.*, t.kind,
           -- step_bucket(line_steps).low: engine/scoring/_buckets.py bucket_from_sql
           CASE WHEN r.line_steps IS NULL THEN NULL
                WHEN $width > 0 THEN (r.line_steps // $width) * $width
                WHEN r.line_steps < 1 THEN 0
                ELSE 1::BIGINT << floor(log2(r.line_steps))::INTEGER END AS bucket_from
    FROM per_task pt
    JOIN tasks t USING (task_id)
    LEFT JOIN runs r USING (run_id)
)
SELECT model,
       label,
       kind,
       bucket_from,
       -- engine/scoring/_buckets.py bucket_to_sql
       CASE WHEN bucket_from IS NULL THEN NULL
            WHEN $width > 0 THEN bucket_from + $width
            WHEN bucket_from = 0 THEN 1
            ELSE 2 * bucket_from END AS bucket_to,
       count(*)                  AS tasks,
       sum(predictions)          AS predictions,
       sum(unparseable)          AS unparseable,
       sum(scored)               AS scored,
       round(avg(accuracy), 3)   AS pass_at_1
FROM bucketed
GROUP BY GROUPING SETS ((model, label, kind), (model, label, kind, bucket_from))
ORDER BY model, label, kind, bucket_from NULLS FIRST;
