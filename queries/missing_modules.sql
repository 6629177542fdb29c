-- name: missing_modules
-- description: Modules the programs import that the sandbox does not have (runs with status missing_module), with the runs and programs that need each.
-- params: none
-- The guest words such a run's exception_message No module named 'NAME', NAME the full
-- dotted name (json.nothere; cut at 1,000 characters), whatever message the program's
-- own exception had: the name is read back from it here.
SELECT regexp_extract(exception_message, '(?s)^No module named ''(.*)''$', 1) AS module,
       count(*)                                                       AS runs,
       count(DISTINCT program_id)                                     AS programs
FROM runs
WHERE status = 'missing_module'
GROUP BY module
ORDER BY runs DESC, module;
