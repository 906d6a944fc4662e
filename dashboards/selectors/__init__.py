"""Read models of the dashboards: what the pages and the REST API show, scoped to the caller.

Scoping (``docs/decisions.md``, "Fair share shows every team"): team-level aggregates — names,
weights, quotas, GPU counts, shares, wait percentiles — are visible to every logged-in user,
because fairness can only be judged by comparison; anything about a job (its name, owner,
image, reason) only to the job's team, through ``portal.access``. With
``GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS=false`` other teams fold into "Other teams". Per-user
usage is a team's own business: only its members (and platform admins) see it.

Every selector runs a fixed number of queries, whatever the number of rows.

One module per page section: ``scope`` (who sees which team), ``times`` (parsing the
pages' and the API's times and steps), ``pool``, ``cluster``, ``fairshare``, ``queue`` and
``usage``. Import the names from the module that holds them.
"""
