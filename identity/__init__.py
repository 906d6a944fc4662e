"""Sign-in with the organisation's identity (OpenID Connect, LDAP), group → team/role rules,
and the team admins' own member pages. Sits beside dashboards and notifications: it reads
and writes the portal core's teams and memberships, and nothing imports it but the shell."""
