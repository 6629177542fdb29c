-- name: stdlib_methods
-- description: Methods of str, list and dict called in the programs' code (by name, as CRUXEval's Appendix A.3 does), with the programs and runs that use each.
-- A call is the text .name( in programs.code, matched against every public method of str,
-- list and dict (owners: the types that have a method of that name); calls on other
-- objects with the same name count too. The list is engine.queries.stdlib_methods().
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
calls AS (
    SELECT program_id,
           unnest(regexp_extract_all(code, '\.([A-Za-z_][A-Za-z0-9_]*)\s*\(', 1)) AS method
    FROM programs
),
used AS (
    SELECT program_id, method, count(*) AS occurrences
    FROM calls JOIN methods USING (method)
    GROUP BY program_id, method
),
program_runs AS (
    SELECT program_id, count(*) AS runs FROM runs GROUP BY program_id
)
SELECT m.method,
       m.owners,
       count(*)                      AS programs,
       sum(u.occurrences)            AS occurrences,
       coalesce(sum(pr.runs), 0)     AS runs
FROM used u
JOIN methods m USING (method)
LEFT JOIN program_runs pr USING (program_id)
GROUP BY m.method, m.owners
ORDER BY programs DESC, occurrences DESC, m.method;
