FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY requirements.txt .
# python-ldap (LDAP sign-in) builds against libldap and libsasl; the compiler goes afterwards.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libldap2-dev libsasl2-dev \
    && pip install --no-cache-dir --require-hashes -r requirements.txt \
    && apt-get purge -y gcc && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
COPY . .
# Static files are collected into the image: on Kubernetes the root filesystem is read-only.
RUN DEBUG=true python manage.py collectstatic --no-input -v0
# A fixed numeric user (Pod Security "restricted" checks runAsNonRoot against a number) and
# the writable paths the manifests mount as emptyDir (compose writes into the image's).
RUN groupadd --system --gid 10001 gpupool \
    && useradd --system --uid 10001 --gid 10001 gpupool \
    && mkdir -p /app/var /var/lib/gpupool /var/run/gpupool/prometheus \
    && chown -R gpupool:gpupool /app/var /var/lib/gpupool /var/run/gpupool
USER 10001:10001
EXPOSE 8000
