-- name: accuracy_by_method
-- description: Model accuracy (pass@1) on tasks whose program calls each str/list/dict method: CRUXEval Appendix A.3's difficulty-by-method view.
-- param: kind str = '' (only tasks of this kind, e.g. output; empty for every kind)
-- requires: predictions(task_id, model, label, sample_index, parsed, error): run steptrace predict first
-- requires: tasks(task_id, kind, run_id): run steptrace tasks first
-- requires: scores(task_id, model, label, sample_index, correct): run steptrace score first
-- Reads predictions (one row per task, model, label and sample: steptrace predict),
-- tasks (task_id, kind, run_id: steptrace tasks) and scores (task_id, model, label,
-- sample_index, correct BOOLEAN: a table or view with those columns), and reports
-- each experiment (model and label) apart. Predictions whose request failed
-- (error not NULL) are not answers and are left out; unparseable ones (parsed false)
-- count in predictions and unparseable, and are scored as their scores row says.
-- pass@1 is the mean over tasks of the share of the task's scored samples that are
-- correct; a prediction without a scores row counts in predictions, not in scored.
-- Methods are found as in stdlib_methods (the same list).
WITH methods(method, owners) AS (VALUES
    ('append', 'list'), ('capitalize', 'str'), ('casefold', 'str'), ('center', 'str'),
    ('clear', 'dict,list'), ('copy', 'dict,list'), ('count', 'list,str'), ('encode', 'str'),
    ('endswith', 'str'), ('expandtabs', 'str'), ('extend', 'list'), ('find', 'str'),
    ('format', 'str'), ('format_map', 'str'), ('fromkeys', 'dict'), ('get', 'dict'),
    ('index', 'list,str'), ('insert', 'list'), ('isalnum', 'str'), ('isalpha', 'str'),
    ('isascii', 'str'), ('isdecimal', 'str'), ('isdigit', 'str'), ('isidentifier', 'str'),
    ('islower', 'str'), ('isnumeric', 'str'), ('isprintable', 'str'), ('isspace', 'str'),
    ('istitle', 'str'), ('isupper', 'str'), ('items', 'dict'), ('join', 'str'),
    ('keys', 'dict'), ('ljust', 'str'), ('lower', 'str'), ('lstrip', 'str'),
    ('maketrans', 'str'), ('partition', 'str'), ('pop', 'dict,list'), ('popitem', 'dict'),
    ('remove', 'list'), ('removeprefix', 'str'), ('removesuffix', 'str'), ('replace', 'str'),
    ('reverse', 'list'), ('rfind', 'str'), ('rindex', 'str'), ('rjust', 'str'),
    ('rpartition', 'str'), ('rsplit', 'str'), ('rstrip', 'str'), ('setdefault', 'dict'),
    ('sort', 'list'), ('split', 'str'), ('splitlines', 'str'), ('startswith', 'str'),
    ('strip', 'str'), ('swapcase', 'str'), ('title', 'str'), ('translate', 'str'),
    ('update', 'dict'), ('upper', 'str'), ('values', 'dict'), ('zfill', 'str')
),
program_methods AS (
    SELECT DISTINCT program_id, method
    FROM (SELECT program_id,
                 unnest(regexp_extract_all(code, '\.([A-Za-z_][A-Za-z0-9_]*)\s*\(', 1)) AS method
          FROM programs)
    JOIN methods USING (method)
),
per_task AS (
    SELECT p.model, p.label, p.task_id, count(*) AS predictions,
           count(*) FILTER (WHERE NOT p.parsed) AS unparseable,
           count(s.correct) AS scored, avg(s.correct::INTEGER) AS accuracy
    FROM predictions p
    LEFT JOIN scores s USING (task_id, model, label, sample_index)
    WHERE p.error IS NULL
    GROUP BY p.model, p.label, p.task_id
)
SELECT pt.model,
       pt.label,
       m.method,
       count(*)                    AS tasks,
       sum(pt.predictions)         AS predictions,
       sum(pt.unparseable)         AS unparseable,
       sum(pt.scored)              AS scored,
       round(avg(pt.accuracy), 3)  AS pass_at_1
FROM per_task pt
JOIN tasks t USING (task_id)
JOIN runs r USING (run_id)
JOIN program_methods m USING (program_id)
WHERE $kind = '' OR t.kind = $kind
GROUP BY pt.model, pt.label, m.method
ORDER BY pt.model, pt.label, pass_at_1 ASC NULLS LAST, m.method;
