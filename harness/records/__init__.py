"""The files stages hand each other, each with one home: metric and outcome names, schema ids,
the run file, the per-query outcomes, results.json, the verdict vocabulary, DVC's flat views."""
