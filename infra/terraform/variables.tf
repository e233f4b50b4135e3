# Inputs of the Parley deployment. Names of server settings follow the environment variables the
# server reads (docs/configuration.md); each description says which one a variable becomes.

# --- Where and what ---------------------------------------------------------------------------

variable "kubeconfig_path" {
  description = "Path of the kubeconfig the provider uses; null: KUBE_CONFIG_PATH, else the in-cluster service account."
  type        = string
  default     = null
}

variable "kubeconfig_context" {
  description = "Context of that kubeconfig; null: its current context (or KUBE_CTX)."
  type        = string
  default     = null
}

variable "namespace" {
  description = "Namespace every object of the deployment lives in."
  type        = string
  default     = "parley"

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.namespace))
    error_message = "namespace must be a DNS label: lowercase letters, digits and '-', at most 63."
  }
}

variable "create_namespace" {
  description = "Create the namespace; false when it exists already (made by a platform team, say)."
  type        = bool
  default     = true
}

variable "name_prefix" {
  description = "Prefix of every object's name (<prefix>-api, <prefix>-engine-mesh, …) and the app.kubernetes.io/instance label, so that two deployments can share a namespace."
  type        = string
  default     = "parley"

  validation {
    # The longest derived name, <prefix>-webhooks-mesh, must stay a DNS label (63).
    condition     = can(regex("^[a-z]([a-z0-9-]{0,28}[a-z0-9])?$", var.name_prefix))
    error_message = "name_prefix must be 1..30 lowercase letters, digits and '-', starting with a letter."
  }
}

variable "image" {
  description = "The Parley container image (registry/repository:tag, best pinned @sha256:digest). The default is the tag `npm run image` gives the image it builds (docker.io/library/parley:<version> once imported into a cluster's container runtime); pushed to a registry, pass REGISTRY/parley:<version>@<digest> as the build prints them. See docs/deployment.md."
  type        = string
  default     = "parley:0.1.0"

  validation {
    condition     = can(regex("^[^\\s]+$", var.image))
    error_message = "image must be an image reference without spaces."
  }
}

variable "image_pull_policy" {
  description = "When the kubelet pulls the image: Always, IfNotPresent or Never."
  type        = string
  default     = "IfNotPresent"

  validation {
    condition     = contains(["Always", "IfNotPresent", "Never"], var.image_pull_policy)
    error_message = "image_pull_policy must be Always, IfNotPresent or Never."
  }
}

variable "image_pull_secrets" {
  description = "Names of docker-registry Secrets in the namespace that the pods pull the image with."
  type        = list(string)
  default     = []
}

variable "command" {
  description = "How the image starts the server, run from the image's working directory: `npm start` without npm in between, so SIGTERM reaches the server itself."
  type        = list(string)
  default     = ["node", "--import", "tsx", "main.ts"]

  validation {
    condition     = length(var.command) > 0
    error_message = "command must name a program."
  }
}

variable "working_dir" {
  description = "The directory holding main.ts in the image; null: the image's WORKDIR."
  type        = string
  default     = null
}

variable "run_as_user" {
  description = "Non-root user id the server runs as (1000 is `node` in the official Node images); the root filesystem is read-only, /tmp a scratch volume."
  type        = number
  default     = 1000

  validation {
    condition     = var.run_as_user >= 1 && floor(var.run_as_user) == var.run_as_user
    error_message = "run_as_user must be a whole number above 0 (root is refused)."
  }
}

variable "service_account_annotations" {
  description = "Annotations of the pods' service account, e.g. eks.amazonaws.com/role-arn or iam.gke.io/gcp-service-account, so S3 is reached with the cloud's workload identity instead of keys."
  type        = map(string)
  default     = {}
}

variable "node_selector" {
  description = "Node labels every Parley pod must be scheduled on."
  type        = map(string)
  default     = {}
}

variable "tolerations" {
  description = "Taints every Parley pod tolerates (a dedicated node pool, say)."
  type = list(object({
    key      = optional(string)
    operator = optional(string, "Equal")
    value    = optional(string)
    effect   = optional(string)
  }))
  default = []

  validation {
    condition     = alltrue([for t in var.tolerations : contains(["Equal", "Exists"], t.operator) && (t.effect == null || contains(["NoSchedule", "PreferNoSchedule", "NoExecute"], t.effect))])
    error_message = "tolerations: operator must be Equal or Exists, effect NoSchedule, PreferNoSchedule, NoExecute or null."
  }
}

variable "tmp_volume_size_limit" {
  description = "Size limit of each pod's /tmp scratch volume: the S3 blob store assembles committed uploads there."
  type        = string
  default     = "1Gi"

  validation {
    condition     = can(regex("^[0-9]+(Ki|Mi|Gi|Ti)$", var.tmp_volume_size_limit))
    error_message = "tmp_volume_size_limit must be a quantity such as 512Mi or 1Gi."
  }
}

# --- Roles and their sizes ----------------------------------------------------------------------

variable "engine_replicas" {
  description = "Engine processes (ROLES=engine): the conversation and inbox actors, the store. Fixed rather than autoscaled: each change moves about 1/N of the shards."
  type        = number
  default     = 2

  validation {
    condition     = var.engine_replicas >= 1 && var.engine_replicas <= 32 && floor(var.engine_replicas) == var.engine_replicas
    error_message = "engine_replicas must be 1..32."
  }
}

variable "webhooks_replicas" {
  description = "Webhook fleet processes (ROLES=webhooks), members of one Kafka consumer group over the webhooks topic's 32 partitions; more than 32 would idle."
  type        = number
  default     = 1

  validation {
    condition     = var.webhooks_replicas >= 1 && var.webhooks_replicas <= 32 && floor(var.webhooks_replicas) == var.webhooks_replicas
    error_message = "webhooks_replicas must be 1..32."
  }
}

variable "api_autoscaling" {
  description = "HorizontalPodAutoscaler of the api role (ROLES=api, stateless): replica bounds, the average CPU utilization (percent of the CPU request) it keeps, and how long load must stay low before it removes a pod."
  type = object({
    min_replicas                     = number
    max_replicas                     = number
    target_cpu_utilization           = number
    scale_down_stabilization_seconds = optional(number, 300)
  })
  default = {
    min_replicas           = 2
    max_replicas           = 10
    target_cpu_utilization = 70
  }

  validation {
    condition = (
      var.api_autoscaling.min_replicas >= 1 && var.api_autoscaling.min_replicas <= var.api_autoscaling.max_replicas && var.api_autoscaling.max_replicas <= 100
      && var.api_autoscaling.target_cpu_utilization >= 10 && var.api_autoscaling.target_cpu_utilization <= 500
      && var.api_autoscaling.scale_down_stabilization_seconds >= 0 && var.api_autoscaling.scale_down_stabilization_seconds <= 3600
    )
    error_message = "api_autoscaling: 1 <= min_replicas <= max_replicas <= 100, target_cpu_utilization 10..500, scale_down_stabilization_seconds 0..3600."
  }
}

variable "gateway_autoscaling" {
  description = "HorizontalPodAutoscaler of the gateway role (ROLES=gateway, holds /ws): as api_autoscaling. Removing a gateway closes its sockets (clients reconnect and catch up), so it scales down one pod a minute at most."
  type = object({
    min_replicas                     = number
    max_replicas                     = number
    target_cpu_utilization           = number
    scale_down_stabilization_seconds = optional(number, 600)
  })
  default = {
    min_replicas           = 2
    max_replicas           = 10
    target_cpu_utilization = 60
  }

  validation {
    condition = (
      var.gateway_autoscaling.min_replicas >= 1 && var.gateway_autoscaling.min_replicas <= var.gateway_autoscaling.max_replicas && var.gateway_autoscaling.max_replicas <= 100
      && var.gateway_autoscaling.target_cpu_utilization >= 10 && var.gateway_autoscaling.target_cpu_utilization <= 500
      && var.gateway_autoscaling.scale_down_stabilization_seconds >= 0 && var.gateway_autoscaling.scale_down_stabilization_seconds <= 3600
    )
    error_message = "gateway_autoscaling: 1 <= min_replicas <= max_replicas <= 100, target_cpu_utilization 10..500, scale_down_stabilization_seconds 0..3600."
  }
}

variable "resources" {
  description = "CPU and memory requests and limits per role (keys api, engine, gateway, webhooks). No CPU limit by default: a throttled process adds latency to every call it serves; the autoscalers count against the CPU request."
  type = map(object({
    requests = object({ cpu = string, memory = string })
    limits   = object({ cpu = optional(string), memory = string })
  }))
  default = {
    api      = { requests = { cpu = "500m", memory = "512Mi" }, limits = { memory = "1Gi" } }
    engine   = { requests = { cpu = "1", memory = "1Gi" }, limits = { memory = "2Gi" } }
    gateway  = { requests = { cpu = "500m", memory = "512Mi" }, limits = { memory = "2Gi" } }
    webhooks = { requests = { cpu = "250m", memory = "256Mi" }, limits = { memory = "512Mi" } }
  }

  validation {
    condition     = join(",", sort(keys(var.resources))) == "api,engine,gateway,webhooks"
    error_message = "resources must have exactly the keys api, engine, gateway and webhooks."
  }

  validation {
    condition = alltrue(flatten([for r in values(var.resources) : [
      can(regex("^([0-9]+m|[0-9]+(\\.[0-9]+)?)$", r.requests.cpu)),
      r.limits.cpu == null || can(regex("^([0-9]+m|[0-9]+(\\.[0-9]+)?)$", coalesce(r.limits.cpu, "0"))),
      can(regex("^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$", r.requests.memory)),
      can(regex("^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$", r.limits.memory)),
    ]]))
    error_message = "resources: cpu quantities look like 250m or 1.5, memory ones like 512Mi or 2Gi."
  }
}

# --- Lifecycle ----------------------------------------------------------------------------------

variable "drain_timeout_ms" {
  description = "DRAIN_TIMEOUT_MS: on SIGTERM, how long requests in flight may take before their connections are cut. The pods' terminationGracePeriodSeconds is derived from it."
  type        = number
  default     = 10000

  validation {
    condition     = var.drain_timeout_ms >= 0 && var.drain_timeout_ms <= 600000 && floor(var.drain_timeout_ms) == var.drain_timeout_ms
    error_message = "drain_timeout_ms must be 0..600000, as the server accepts."
  }
}

variable "prestop_delay_seconds" {
  description = "How long an api or gateway pod keeps serving after Kubernetes starts deleting it, before SIGTERM: the time the ingress controller takes to drop it from its upstreams. The server stops accepting connections at SIGTERM."
  type        = number
  default     = 5

  validation {
    condition     = var.prestop_delay_seconds >= 0 && var.prestop_delay_seconds <= 60 && floor(var.prestop_delay_seconds) == var.prestop_delay_seconds
    error_message = "prestop_delay_seconds must be 0..60."
  }
}

variable "startup_timeout_seconds" {
  description = "How long a process may take to start before the kubelet restarts it: the first start against an empty keyspace applies the schema, and every node first waits up to 10 s to hear from the whole mesh."
  type        = number
  default     = 300

  validation {
    condition     = var.startup_timeout_seconds >= 30 && var.startup_timeout_seconds <= 3600
    error_message = "startup_timeout_seconds must be 30..3600."
  }
}

# --- The mesh between processes (Moleculer's TCP transporter) -----------------------------------

variable "mesh_port" {
  description = "Container port of the static TCP mesh (TRANSPORTER). The same on every pod: each pod has its own address."
  type        = number
  default     = 4000

  validation {
    condition     = var.mesh_port >= 1024 && var.mesh_port <= 65535 && floor(var.mesh_port) == var.mesh_port
    error_message = "mesh_port must be 1024..65535 (the server runs as non-root)."
  }
}

variable "mesh_discovery_wait_seconds" {
  description = "At container start, how long to wait for DNS to list every engine pod before the process starts with the peers found so far (see files/mesh-env.mjs: the engines are what joins every node into one mesh)."
  type        = number
  default     = 30

  validation {
    condition     = var.mesh_discovery_wait_seconds >= 0 && var.mesh_discovery_wait_seconds <= 300
    error_message = "mesh_discovery_wait_seconds must be 0..300."
  }
}

variable "cluster_domain" {
  description = "The cluster's DNS domain, in the headless Services' names that pods resolve at start."
  type        = string
  default     = "cluster.local"

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$", var.cluster_domain))
    error_message = "cluster_domain must be a DNS name such as cluster.local."
  }
}

variable "network_policy_enabled" {
  description = "Create a NetworkPolicy that admits the mesh port only from this deployment's pods: the mesh carries unauthenticated broker calls. Needs a CNI that enforces NetworkPolicy."
  type        = bool
  default     = true
}

# --- Front: Ingress, public URLs, proxies ----------------------------------------------------------

variable "public_host" {
  description = "Host name clients use (the Ingress rule's host), e.g. chat.example.com."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$", var.public_host))
    error_message = "public_host must be a lowercase DNS name with at least one dot."
  }
}

variable "ingress_class_name" {
  description = "IngressClass of the ingress-nginx controller serving the deployment (the annotations are ingress-nginx's)."
  type        = string
  default     = "nginx"
}

variable "ingress_tls_secret_name" {
  description = "kubernetes.io/tls Secret in the namespace holding the certificate of public_host (made by cert-manager, say); null serves plain HTTP and hands out http:// and ws:// URLs."
  type        = string
  default     = null
}

variable "ingress_annotations" {
  description = "Extra annotations on every Ingress (cert-manager.io/cluster-issuer, say)."
  type        = map(string)
  default     = {}
}

variable "websocket_timeout_seconds" {
  description = "How long the ingress keeps a /ws connection with nothing moving before closing it (proxy-read-timeout and proxy-send-timeout of the /ws route). Clients ping every few seconds; this bounds a silently dead one."
  type        = number
  default     = 3600

  validation {
    condition     = var.websocket_timeout_seconds >= 60 && var.websocket_timeout_seconds <= 86400
    error_message = "websocket_timeout_seconds must be 60..86400."
  }
}

variable "public_url" {
  description = "PUBLIC_URL: base of the URLs the server hands out; null: http(s)://<public_host>."
  type        = string
  default     = null

  validation {
    condition     = var.public_url == null || can(regex("^https?://[^\\s/]+(/[^\\s]*)?$", coalesce(var.public_url, "http://x")))
    error_message = "public_url must be an http(s) URL."
  }
}

variable "public_ws_url" {
  description = "PUBLIC_WS_URL: what GetClientConfig hands clients as the WebSocket URL; null: ws(s)://<public_host>/ws."
  type        = string
  default     = null

  validation {
    condition     = var.public_ws_url == null || can(regex("^wss?://[^\\s/]+/[^\\s]*$", coalesce(var.public_ws_url, "ws://x/ws")))
    error_message = "public_ws_url must be a ws(s) URL with a path."
  }
}

variable "trusted_proxies" {
  description = "TRUSTED_PROXIES: addresses or CIDR blocks whose X-Forwarded-For is believed: the ingress controller pods' range (the pod CIDR). Empty trusts none, and every client then counts as the controller's address in the per-address abuse limits."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.trusted_proxies : can(cidrhost(strcontains(p, "/") ? p : (strcontains(p, ":") ? "${p}/128" : "${p}/32"), 0))])
    error_message = "trusted_proxies must list IP addresses or CIDR blocks."
  }
}

# --- Server settings ----------------------------------------------------------------------------

variable "listen_host" {
  description = "HOST: the address each process binds its HTTP port to; \"::\" on an IPv6-only cluster (the mesh names IPv6 pods too)."
  type        = string
  default     = "0.0.0.0"

  validation {
    condition     = contains(["0.0.0.0", "::"], var.listen_host)
    error_message = "listen_host must be 0.0.0.0 or \"::\" (every interface: a pod is reached on its own address)."
  }
}

variable "log_level" {
  description = "LOG_LEVEL: fatal, error, warn, info or debug."
  type        = string
  default     = "info"

  validation {
    condition     = contains(["fatal", "error", "warn", "info", "debug"], var.log_level)
    error_message = "log_level must be fatal, error, warn, info or debug."
  }
}

variable "socket_driver" {
  description = "SOCKET_DRIVER: uws (uWebSockets.js, its native binary for Node 20 must load in the image) or ws."
  type        = string
  default     = "uws"

  validation {
    condition     = contains(["uws", "ws"], var.socket_driver)
    error_message = "socket_driver must be uws or ws."
  }
}

variable "code_delivery" {
  description = "CODE_DELIVERY: how verification codes leave the server, smtp://user:pass@host:port or smtps://… in production (console logs codes, file: writes them inside the pod). Kept in the Secret: it holds the SMTP password."
  type        = string
  sensitive   = true

  validation {
    condition     = can(regex("^(console|file:.+|smtps?://.+)$", var.code_delivery))
    error_message = "code_delivery must be console, file:<path>, smtp://… or smtps://…."
  }
}

variable "smtp_from" {
  description = "SMTP_FROM: sender of verification emails; null: the server's default."
  type        = string
  default     = null
}

variable "webhook_concurrency" {
  description = "WEBHOOK_CONCURRENCY: webhook requests in flight at once per webhooks process."
  type        = number
  default     = 32

  validation {
    condition     = var.webhook_concurrency >= 1 && var.webhook_concurrency <= 10000 && floor(var.webhook_concurrency) == var.webhook_concurrency
    error_message = "webhook_concurrency must be 1..10000."
  }
}

variable "extra_ca_certs_pem" {
  description = "PEM certificates that webhook HTTPS calls trust besides the public CAs (NODE_EXTRA_CA_CERTS, mounted from a ConfigMap); null: none."
  type        = string
  default     = null

  validation {
    condition     = var.extra_ca_certs_pem == null || strcontains(coalesce(var.extra_ca_certs_pem, "-----BEGIN CERTIFICATE-----"), "-----BEGIN CERTIFICATE-----")
    error_message = "extra_ca_certs_pem must hold PEM certificates."
  }
}

variable "verify_codes_per_address_per_minute" {
  description = "VERIFY_CODES_PER_ADDRESS_PER_MINUTE: verification codes one client address may request per minute; 0 turns the limit off."
  type        = number
  default     = 5

  validation {
    condition     = var.verify_codes_per_address_per_minute >= 0 && var.verify_codes_per_address_per_minute <= 1000000
    error_message = "verify_codes_per_address_per_minute must be 0..1000000."
  }
}

variable "verify_codes_per_minute" {
  description = "VERIFY_CODES_PER_MINUTE: verification codes the whole deployment sends per minute (a ceiling on email cost); 0 turns it off."
  type        = number
  default     = 120

  validation {
    condition     = var.verify_codes_per_minute >= 0 && var.verify_codes_per_minute <= 1000000
    error_message = "verify_codes_per_minute must be 0..1000000."
  }
}

variable "sign_in_attempts_per_address_per_minute" {
  description = "SIGN_IN_ATTEMPTS_PER_ADDRESS_PER_MINUTE: password and code checks one client address may make per minute; 0 turns it off."
  type        = number
  default     = 30

  validation {
    condition     = var.sign_in_attempts_per_address_per_minute >= 0 && var.sign_in_attempts_per_address_per_minute <= 1000000
    error_message = "sign_in_attempts_per_address_per_minute must be 0..1000000."
  }
}

variable "extra_environment" {
  description = "Further server variables put into the ConfigMap as they are (one the server reads that this configuration does not set itself); a variable this configuration sets is refused here."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.extra_environment) : can(regex("^[A-Z][A-Z0-9_]*$", k))])
    error_message = "extra_environment keys must be environment variable names (A-Z, 0-9, _)."
  }
}

variable "prometheus_scrape_annotations" {
  description = "Annotate the pods with prometheus.io/scrape, /port and /path so an annotation-driven Prometheus scrapes each process's /metrics."
  type        = bool
  default     = true
}

# --- Backing services ---------------------------------------------------------------------------

variable "cassandra_contact_points" {
  description = "CASSANDRA_CONTACT_POINTS: host:port of ScyllaDB or Cassandra 5 nodes to contact first (a managed cluster, or an operator's Service such as <cluster>-client.<ns>.svc:9042)."
  type        = list(string)

  validation {
    condition     = length(var.cassandra_contact_points) > 0 && alltrue([for p in var.cassandra_contact_points : can(regex("^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9.-]+):[0-9]{1,5}$", p))])
    error_message = "cassandra_contact_points must list host:port entries ([v6]:port for IPv6)."
  }
}

variable "cassandra_keyspace" {
  description = "CASSANDRA_KEYSPACE: the keyspace, created with its schema at the first start when missing."
  type        = string
  default     = "parley"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_]{0,47}$", var.cassandra_keyspace))
    error_message = "cassandra_keyspace must be lowercase letters, digits and _, at most 48, starting with a letter."
  }
}

variable "cassandra_local_dc" {
  description = "CASSANDRA_LOCAL_DC: the datacenter the pods run next to; LOCAL_QUORUM and LOCAL_SERIAL are counted there, so it must be the cluster's real DC name."
  type        = string

  validation {
    condition     = length(trimspace(var.cassandra_local_dc)) > 0
    error_message = "cassandra_local_dc must name a datacenter."
  }
}

variable "cassandra_replication" {
  description = "CASSANDRA_REPLICATION: replication of the keyspace the first start creates, a CQL map such as {'class': 'NetworkTopologyStrategy', 'dc1': 3}. Required here: the server's default (SimpleStrategy, factor 1) suits one development node only."
  type        = string

  validation {
    condition     = can(regex("^\\{.*'class'\\s*:.*\\}$", var.cassandra_replication))
    error_message = "cassandra_replication must be a CQL replication map, e.g. {'class': 'NetworkTopologyStrategy', 'dc1': 3}."
  }
}

variable "cassandra_migrate" {
  description = "CASSANDRA_MIGRATE: true lets start-up apply missing schema migrations (one runner at a time); false makes it refuse a keyspace behind the image (run `npm run store -- migrate` as a release step then)."
  type        = bool
  default     = true
}

variable "kafka_brokers" {
  description = "KAFKA_BROKERS: host:port of Kafka bootstrap brokers (a managed Kafka, or an operator's bootstrap Service such as <cluster>-kafka-bootstrap.<ns>.svc:9092). The server creates its topics."
  type        = list(string)

  validation {
    condition     = length(var.kafka_brokers) > 0 && alltrue([for b in var.kafka_brokers : can(regex("^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9.-]+):[0-9]{1,5}$", b))])
    error_message = "kafka_brokers must list host:port entries."
  }
}

variable "kafka_topic_prefix" {
  description = "KAFKA_TOPIC_PREFIX: prefix of the topic and consumer-group names; deployments sharing a Kafka need different ones."
  type        = string
  default     = "parley."

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{0,32}$", var.kafka_topic_prefix))
    error_message = "kafka_topic_prefix must be at most 32 of letters, digits, '.', '_' and '-'."
  }
}

variable "redis_url" {
  description = "REDIS_URL without credentials: redis://host:port or rediss://host:port (TLS), optionally /<db>. The credentials come from redis_username and redis_password; the assembled URL is kept in the Secret."
  type        = string

  validation {
    condition     = can(regex("^rediss?://[^@/\\s]+(/[0-9]+)?$", var.redis_url))
    error_message = "redis_url must be redis://host:port or rediss://host:port[/db], without user or password."
  }
}

variable "redis_username" {
  description = "Redis ACL user; null: the default user (password only, or none)."
  type        = string
  default     = null
}

variable "redis_password" {
  description = "Redis password (AUTH); null: none. Kept in the Secret only."
  type        = string
  default     = null
  sensitive   = true
}

variable "redis_prefix" {
  description = "REDIS_PREFIX: key prefix in Redis, so deployments can share one."
  type        = string
  default     = "parley:"

  validation {
    condition     = can(regex("^[A-Za-z0-9._:-]{0,32}$", var.redis_prefix))
    error_message = "redis_prefix must be at most 32 of letters, digits, '.', '_', ':' and '-'."
  }
}

variable "s3_bucket" {
  description = "S3_BUCKET: the media bucket; it must exist, start-up checks it and the credentials."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.s3_bucket))
    error_message = "s3_bucket must be an S3 bucket name (3..63 of a-z, 0-9, '.' and '-')."
  }
}

variable "s3_region" {
  description = "S3_REGION: the bucket's region."
  type        = string
  default     = "us-east-1"
}

variable "s3_endpoint" {
  description = "S3_ENDPOINT: base URL of an S3-compatible API (MinIO, R2, Ceph…); null: AWS's endpoint of s3_region."
  type        = string
  default     = null

  validation {
    condition     = var.s3_endpoint == null || can(regex("^https?://[^/\\s]+/?$", coalesce(var.s3_endpoint, "http://x")))
    error_message = "s3_endpoint must be an http(s) base URL such as https://minio.storage.svc:9000."
  }
}

variable "s3_force_path_style" {
  description = "S3_FORCE_PATH_STYLE: bucket in the path rather than the host name; null: the server's default (true with s3_endpoint, else false)."
  type        = bool
  default     = null
}

variable "s3_access_key_id" {
  description = "S3_ACCESS_KEY_ID, kept in the Secret; null together with s3_secret_access_key: the AWS SDK's own chain (workload identity through service_account_annotations)."
  type        = string
  default     = null
  sensitive   = true
}

variable "s3_secret_access_key" {
  description = "S3_SECRET_ACCESS_KEY, kept in the Secret; set with s3_access_key_id or not at all."
  type        = string
  default     = null
  sensitive   = true
}

variable "push_notifier" {
  description = "PUSH_NOTIFIER: where offline notifications go, some of log (one log line per device), apns, fcm. apns needs the apns_* variables, fcm needs fcm_service_account_json."
  type        = list(string)
  default     = ["log"]

  validation {
    condition     = length(var.push_notifier) > 0 && alltrue([for name in var.push_notifier : contains(["log", "apns", "fcm"], name)])
    error_message = "push_notifier must list some of log, apns, fcm."
  }
}

variable "apns_key_pem" {
  description = "APNS_KEY: the .p8 token-signing key Apple issued (its PEM text), kept in the Secret; needed with apns in push_notifier."
  type        = string
  default     = null
  sensitive   = true
}

variable "apns_key_id" {
  description = "APNS_KEY_ID: the key's 10-character id."
  type        = string
  default     = null
}

variable "apns_team_id" {
  description = "APNS_TEAM_ID: the Apple developer team id."
  type        = string
  default     = null
}

variable "apns_topic" {
  description = "APNS_TOPIC: the iOS app's bundle id."
  type        = string
  default     = null
}

variable "fcm_service_account_json" {
  description = "FCM_SERVICE_ACCOUNT: the Google service account key (its JSON text), kept in the Secret; needed with fcm in push_notifier."
  type        = string
  default     = null
  sensitive   = true
}
