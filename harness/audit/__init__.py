"""The claims audit: the registry (claims.yaml and its parser), printed-number arithmetic,
relations across claims, the statistics of one verdict, the rules, the audit document and
the CI gate."""
