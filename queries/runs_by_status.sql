-- name: runs_by_status
-- description: How many runs ended in each status, with how many matched the expected output.
-- params: none
SELECT status,
       count(*)                                   AS runs,
       count(*) FILTER (WHERE output_matches)     AS matching,
       count(*) FILTER (WHERE NOT output_matches) AS not_matching,
       sum(line_steps)                            AS line_steps
FROM runs
GROUP BY status
ORDER BY runs DESC, status;
