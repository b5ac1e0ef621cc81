"""web stage of AACO: the REST API and the dashboard (optional extra ``aaco[web]``)."""
