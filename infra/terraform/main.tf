# Parley on Kubernetes: one Deployment per role (docs/cluster.md), their configuration in a
# ConfigMap and a Secret, the processes joined by Moleculer's static TCP mesh, api and gateway behind
# an ingress-nginx Ingress. The backing services (ScyllaDB/Cassandra, Kafka, Redis, S3) are not
# created here: they are managed services or operator-run clusters, reached by the variables.

locals {
  roles = toset(["api", "engine", "gateway", "webhooks"])
  # Behind the Ingress: they get a Service, an autoscaler and a preStop delay.
  client_roles = toset(["api", "gateway"])

  namespace = var.create_namespace ? kubernetes_namespace_v1.parley[0].metadata[0].name : var.namespace
  http_port = 8080

  common_labels = {
    "app.kubernetes.io/name"       = "parley"
    "app.kubernetes.io/instance"   = var.name_prefix
    "app.kubernetes.io/managed-by" = "opentofu"
  }
  # Every pod of this deployment, whatever its role: the NetworkPolicy's peers on the mesh.
  instance_selector = {
    "app.kubernetes.io/name"     = "parley"
    "app.kubernetes.io/instance" = var.name_prefix
  }
  role_selector = { for role in local.roles : role => merge(local.instance_selector, { "app.kubernetes.io/component" = role }) }

  tls           = var.ingress_tls_secret_name != null
  public_url    = coalesce(var.public_url, "${local.tls ? "https" : "http"}://${var.public_host}")
  public_ws_url = coalesce(var.public_ws_url, "${local.tls ? "wss" : "ws"}://${var.public_host}/ws")

  # The headless Service per role whose DNS name lists that role's pods (files/mesh-env.mjs).
  mesh_service = { for role in local.roles : role => "${var.name_prefix}-${role}-mesh" }

  # What a SIGTERM sets in motion, in order (docs/configuration.md, "Stopping"): requests in flight get
  # DRAIN_TIMEOUT_MS; then WebSockets close (2 s for clients to answer), background work gets up to
  # 5 s, the broker leaves the mesh and the Kafka group, the store closes. 15 s covers the part
  # after the drain with room to spare; an api or gateway pod first sleeps through its preStop.
  prestop_seconds     = { for role in local.roles : role => contains(local.client_roles, role) ? var.prestop_delay_seconds : 0 }
  termination_seconds = { for role in local.roles : role => local.prestop_seconds[role] + ceil(var.drain_timeout_ms / 1000) + 15 }

  redis_userinfo = (
    var.redis_password != null
    ? "${var.redis_username == null ? "" : local.url_escaped_username}:${replace(urlencode(coalesce(var.redis_password, "-")), "+", "%20")}@"
    : (var.redis_username == null ? "" : "${local.url_escaped_username}@")
  )
  # urlencode writes a space as "+", which a URL's user part reads as a plus sign.
  url_escaped_username = replace(urlencode(coalesce(var.redis_username, "-")), "+", "%20")

  # Settings every process reads, by the names shared/config.ts reads them.
  config_env = merge(
    var.extra_environment,
    {
      HOST                                    = var.listen_host
      PORT                                    = tostring(local.http_port)
      PUBLIC_URL                              = local.public_url
      PUBLIC_WS_URL                           = local.public_ws_url
      TRUSTED_PROXIES                         = join(",", var.trusted_proxies)
      LOG_LEVEL                               = var.log_level
      DRAIN_TIMEOUT_MS                        = tostring(var.drain_timeout_ms)
      SOCKET_DRIVER                           = var.socket_driver
      WEBHOOK_CONCURRENCY                     = tostring(var.webhook_concurrency)
      VERIFY_CODES_PER_ADDRESS_PER_MINUTE     = tostring(var.verify_codes_per_address_per_minute)
      VERIFY_CODES_PER_MINUTE                 = tostring(var.verify_codes_per_minute)
      SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE = tostring(var.sign_in_attempts_per_address_per_minute)
      STORE                                   = "cassandra"
      CASSANDRA_CONTACT_POINTS                = join(",", var.cassandra_contact_points)
      CASSANDRA_KEYSPACE                      = var.cassandra_keyspace
      CASSANDRA_LOCAL_DC                      = var.cassandra_local_dc
      CASSANDRA_REPLICATION                   = var.cassandra_replication
      CASSANDRA_MIGRATE                       = tostring(var.cassandra_migrate)
      KAFKA_BROKERS                           = join(",", var.kafka_brokers)
      KAFKA_TOPIC_PREFIX                      = var.kafka_topic_prefix
      REDIS_PREFIX                            = var.redis_prefix
      BLOB_STORE                              = "s3"
      S3_BUCKET                               = var.s3_bucket
      S3_REGION                               = var.s3_region
      PUSH_NOTIFIER                           = join(",", var.push_notifier)
    },
    contains(var.push_notifier, "apns") ? { APNS_KEY_ID = var.apns_key_id, APNS_TEAM_ID = var.apns_team_id, APNS_TOPIC = var.apns_topic } : {},
    var.s3_endpoint == null ? {} : { S3_ENDPOINT = var.s3_endpoint },
    var.s3_force_path_style == null ? {} : { S3_FORCE_PATH_STYLE = tostring(var.s3_force_path_style) },
    var.smtp_from == null ? {} : { SMTP_FROM = var.smtp_from },
    var.extra_ca_certs_pem == null ? {} : { NODE_EXTRA_CA_CERTS = "/etc/parley-ca/ca.pem" },
  )

  secret_env = merge(
    {
      REDIS_URL     = replace(var.redis_url, "://", "://${local.redis_userinfo}")
      CODE_DELIVERY = var.code_delivery
    },
    var.s3_access_key_id == null ? {} : {
      S3_ACCESS_KEY_ID     = var.s3_access_key_id
      S3_SECRET_ACCESS_KEY = var.s3_secret_access_key
    },
    contains(var.push_notifier, "apns") ? { APNS_KEY = var.apns_key_pem } : {},
    contains(var.push_notifier, "fcm") ? { FCM_SERVICE_ACCOUNT = var.fcm_service_account_json } : {},
  )

  # Set per pod rather than in the ConfigMap: extra_environment must not shadow them either.
  pod_env_names = ["ROLES", "NODE_ID", "TRANSPORTER", "POD_IP", "MESH_ROLE", "MESH_PORT", "MESH_PEERS", "MESH_WAIT_SECONDS"]
  managed_env_names = setunion(
    local.pod_env_names,
    ["HOST", "PORT", "PUBLIC_URL", "PUBLIC_WS_URL", "TRUSTED_PROXIES", "LOG_LEVEL", "DRAIN_TIMEOUT_MS", "SOCKET_DRIVER", "WEBHOOK_CONCURRENCY",
      "VERIFY_CODES_PER_ADDRESS_PER_MINUTE", "VERIFY_CODES_PER_MINUTE", "SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE", "STORE", "CASSANDRA_CONTACT_POINTS",
      "CASSANDRA_KEYSPACE", "CASSANDRA_LOCAL_DC", "CASSANDRA_REPLICATION", "CASSANDRA_MIGRATE", "KAFKA_BROKERS", "KAFKA_TOPIC_PREFIX", "REDIS_PREFIX",
      "BLOB_STORE", "S3_BUCKET", "S3_REGION", "S3_ENDPOINT", "S3_FORCE_PATH_STYLE", "SMTP_FROM", "NODE_EXTRA_CA_CERTS",
      "REDIS_URL", "CODE_DELIVERY", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY", "PUSH_NOTIFIER", "APNS_KEY", "APNS_KEY_FILE", "APNS_KEY_ID",
    "APNS_TEAM_ID", "APNS_TOPIC", "FCM_SERVICE_ACCOUNT", "FCM_SERVICE_ACCOUNT_FILE"],
  )
}

resource "kubernetes_namespace_v1" "parley" {
  count = var.create_namespace ? 1 : 0

  metadata {
    name   = var.namespace
    labels = local.common_labels
  }
}

resource "kubernetes_service_account_v1" "parley" {
  metadata {
    name        = var.name_prefix
    namespace   = local.namespace
    labels      = local.common_labels
    annotations = var.service_account_annotations
  }
  # The server never calls the Kubernetes API; cloud workload identity injects its own token.
  automount_service_account_token = false
}

resource "kubernetes_config_map_v1" "env" {
  metadata {
    name      = "${var.name_prefix}-env"
    namespace = local.namespace
    labels    = local.common_labels
  }
  data = local.config_env

  lifecycle {
    precondition {
      condition     = length(setintersection(keys(var.extra_environment), local.managed_env_names)) == 0
      error_message = "extra_environment sets ${join(", ", setintersection(keys(var.extra_environment), local.managed_env_names))}, which this configuration sets itself: use its own variable."
    }
  }
}

resource "kubernetes_secret_v1" "env" {
  metadata {
    name      = "${var.name_prefix}-env"
    namespace = local.namespace
    labels    = local.common_labels
  }
  type = "Opaque"
  data = local.secret_env

  lifecycle {
    precondition {
      condition     = (var.s3_access_key_id == null) == (var.s3_secret_access_key == null)
      error_message = "Set s3_access_key_id and s3_secret_access_key together, or neither (the SDK's own chain)."
    }
    # The server would refuse to start without them; the plan says so first.
    precondition {
      condition     = !contains(var.push_notifier, "apns") || (var.apns_key_pem != null && var.apns_key_id != null && var.apns_team_id != null && var.apns_topic != null)
      error_message = "push_notifier lists apns: set apns_key_pem, apns_key_id, apns_team_id and apns_topic."
    }
    precondition {
      condition     = !contains(var.push_notifier, "fcm") || var.fcm_service_account_json != null
      error_message = "push_notifier lists fcm: set fcm_service_account_json."
    }
  }
}

# The start-up of every container: name the node after its pod and find the mesh (files/).
resource "kubernetes_config_map_v1" "mesh" {
  metadata {
    name      = "${var.name_prefix}-mesh"
    namespace = local.namespace
    labels    = local.common_labels
  }
  data = {
    "start.sh"     = file("${path.module}/files/start.sh")
    "mesh-env.mjs" = file("${path.module}/files/mesh-env.mjs")
  }
}

resource "kubernetes_config_map_v1" "mesh_peers" {
  metadata {
    name      = "${var.name_prefix}-mesh-peers"
    namespace = local.namespace
    labels    = local.common_labels
  }
  data = {
    # Every role's headless Service, and how many of its pods to wait for at start: the engines
    # only, to which every node connects, so that nodes starting together (a fresh install) cannot
    # form separate meshes; api and gateway pods find each other through them. The trailing dot
    # makes the names absolute: not tried against the pod's search domains first.
    MESH_PEERS = join(",", [for role in sort(tolist(local.roles)) :
      "${role}=${local.mesh_service[role]}.${local.namespace}.svc.${var.cluster_domain}.:${role == "engine" ? var.engine_replicas : 0}"
    ])
    MESH_WAIT_SECONDS = tostring(var.mesh_discovery_wait_seconds)
  }
}

resource "kubernetes_config_map_v1" "ca" {
  count = var.extra_ca_certs_pem == null ? 0 : 1

  metadata {
    name      = "${var.name_prefix}-ca"
    namespace = local.namespace
    labels    = local.common_labels
  }
  data = {
    "ca.pem" = var.extra_ca_certs_pem
  }
}
