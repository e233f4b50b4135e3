# Plans the whole deployment against a mocked provider (no cluster needed) and checks what the
# server's contract depends on: probes on /healthz, a grace period that covers the drain, the
# environment the server reads, the mesh's Services, the /ws route and the autoscalers.

mock_provider "kubernetes" {}

variables {
  image                    = "registry.example.com/parley:2026.11.24"
  public_host              = "chat.example.com"
  code_delivery            = "smtp://parley:mail-secret@smtp.example.com:587"
  cassandra_contact_points = ["scylla-client.scylla.svc:9042", "[fd00::12]:9042"]
  cassandra_local_dc       = "dc1"
  cassandra_replication    = "{'class': 'NetworkTopologyStrategy', 'dc1': 3}"
  kafka_brokers            = ["kafka-bootstrap.kafka.svc:9092"]
  redis_url                = "rediss://redis.example.internal:6380/0"
  redis_password           = "p@ss word"
  s3_bucket                = "parley-media"
  trusted_proxies          = ["10.244.0.0/16", "fd00:10:244::/56"]
}

run "every_role_is_a_deployment_probed_on_healthz" {
  command = plan

  assert {
    condition     = join(",", sort(keys(kubernetes_deployment_v1.role))) == "api,engine,gateway,webhooks"
    error_message = "one Deployment per role"
  }

  assert {
    condition = alltrue([for role, d in kubernetes_deployment_v1.role : alltrue([
      d.spec[0].template[0].spec[0].container[0].readiness_probe[0].http_get[0].path == "/healthz",
      d.spec[0].template[0].spec[0].container[0].liveness_probe[0].http_get[0].path == "/livez",
      d.spec[0].template[0].spec[0].container[0].startup_probe[0].http_get[0].path == "/healthz",
      d.spec[0].template[0].spec[0].container[0].readiness_probe[0].http_get[0].port == "http",
    ])])
    error_message = "every role is probed on its http port: /healthz for startup and readiness, /livez for liveness"
  }

  assert {
    condition = alltrue([for role, d in kubernetes_deployment_v1.role :
      anytrue([for e in d.spec[0].template[0].spec[0].container[0].env : e.name == "ROLES" && e.value == role])
    ])
    error_message = "each Deployment runs its own role (ROLES)"
  }

  assert {
    condition = alltrue([for role, d in kubernetes_deployment_v1.role :
      d.spec[0].template[0].spec[0].container[0].command[1] == "/etc/parley-mesh/start.sh"
      && join(" ", d.spec[0].template[0].spec[0].container[0].args) == "node --import tsx main.ts"
    ])
    error_message = "start.sh sets the mesh variables and execs the server command"
  }

  assert {
    condition     = kubernetes_deployment_v1.role["engine"].spec[0].replicas == "2" && kubernetes_deployment_v1.role["webhooks"].spec[0].replicas == "1"
    error_message = "engine and webhooks have fixed counts"
  }
}

run "the_grace_period_covers_the_drain" {
  command = plan

  variables {
    drain_timeout_ms      = 20000
    prestop_delay_seconds = 7
  }

  assert {
    condition = alltrue([
      kubernetes_deployment_v1.role["api"].spec[0].template[0].spec[0].termination_grace_period_seconds == 7 + 20 + 15,
      kubernetes_deployment_v1.role["gateway"].spec[0].template[0].spec[0].termination_grace_period_seconds == 7 + 20 + 15,
      kubernetes_deployment_v1.role["engine"].spec[0].template[0].spec[0].termination_grace_period_seconds == 20 + 15,
      kubernetes_deployment_v1.role["webhooks"].spec[0].template[0].spec[0].termination_grace_period_seconds == 20 + 15,
    ])
    error_message = "terminationGracePeriodSeconds = preStop + DRAIN_TIMEOUT_MS + 15 s for the stop after the drain"
  }

  assert {
    condition = alltrue([for role, d in kubernetes_deployment_v1.role :
      d.spec[0].template[0].spec[0].container[0].liveness_probe[0].failure_threshold * d.spec[0].template[0].spec[0].container[0].liveness_probe[0].period_seconds
      > d.spec[0].template[0].spec[0].termination_grace_period_seconds
    ])
    error_message = "liveness cannot fail within a drain"
  }

  assert {
    condition = alltrue([
      length(kubernetes_deployment_v1.role["api"].spec[0].template[0].spec[0].container[0].lifecycle) == 1,
      length(kubernetes_deployment_v1.role["gateway"].spec[0].template[0].spec[0].container[0].lifecycle) == 1,
      length(kubernetes_deployment_v1.role["engine"].spec[0].template[0].spec[0].container[0].lifecycle) == 0,
      length(kubernetes_deployment_v1.role["webhooks"].spec[0].template[0].spec[0].container[0].lifecycle) == 0,
      strcontains(kubernetes_deployment_v1.role["api"].spec[0].template[0].spec[0].container[0].lifecycle[0].pre_stop[0].exec[0].command[2], "7000"),
    ])
    error_message = "only the roles behind the Ingress wait in preStop, for prestop_delay_seconds"
  }

  assert {
    condition     = kubernetes_config_map_v1.env.data["DRAIN_TIMEOUT_MS"] == "20000"
    error_message = "the server drains for as long as the grace period assumes"
  }
}

run "configuration_by_the_names_the_server_reads" {
  command = plan

  assert {
    condition = alltrue([
      kubernetes_config_map_v1.env.data["STORE"] == "cassandra",
      kubernetes_config_map_v1.env.data["BLOB_STORE"] == "s3",
      kubernetes_config_map_v1.env.data["CASSANDRA_CONTACT_POINTS"] == "scylla-client.scylla.svc:9042,[fd00::12]:9042",
      kubernetes_config_map_v1.env.data["CASSANDRA_LOCAL_DC"] == "dc1",
      kubernetes_config_map_v1.env.data["KAFKA_BROKERS"] == "kafka-bootstrap.kafka.svc:9092",
      kubernetes_config_map_v1.env.data["S3_BUCKET"] == "parley-media",
      kubernetes_config_map_v1.env.data["TRUSTED_PROXIES"] == "10.244.0.0/16,fd00:10:244::/56",
      kubernetes_config_map_v1.env.data["PUBLIC_URL"] == "http://chat.example.com",
      kubernetes_config_map_v1.env.data["PUBLIC_WS_URL"] == "ws://chat.example.com/ws",
      !contains(keys(kubernetes_config_map_v1.env.data), "S3_ENDPOINT"),
      !contains(keys(kubernetes_config_map_v1.env.data), "TRANSPORTER"),
    ])
    error_message = "the ConfigMap carries the cluster settings under the server's names"
  }

  assert {
    condition = nonsensitive(alltrue([
      kubernetes_secret_v1.env.data["REDIS_URL"] == "rediss://:p%40ss%20word@redis.example.internal:6380/0",
      kubernetes_secret_v1.env.data["CODE_DELIVERY"] == "smtp://parley:mail-secret@smtp.example.com:587",
      !contains(keys(kubernetes_secret_v1.env.data), "S3_ACCESS_KEY_ID"),
    ]))
    error_message = "the Secret holds REDIS_URL with the escaped password and CODE_DELIVERY; no S3 keys when none are given"
  }

  assert {
    condition = alltrue([for role, d in kubernetes_deployment_v1.role : alltrue([
      d.spec[0].template[0].spec[0].container[0].env_from[0].config_map_ref[0].name == "parley-env",
      d.spec[0].template[0].spec[0].container[0].env_from[1].secret_ref[0].name == "parley-env",
      d.spec[0].template[0].spec[0].enable_service_links == false,
    ])])
    error_message = "every role reads the same ConfigMap and Secret, and no service links"
  }
}

run "tls_and_s3_keys" {
  command = plan

  variables {
    ingress_tls_secret_name = "parley-tls"
    s3_endpoint             = "https://minio.storage.svc:9000"
    s3_access_key_id        = "parley"
    s3_secret_access_key    = "parley-secret"
    redis_username          = "parley"
    extra_ca_certs_pem      = "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n"
  }

  assert {
    condition = alltrue([
      kubernetes_config_map_v1.env.data["NODE_EXTRA_CA_CERTS"] == "/etc/parley-ca/ca.pem",
      kubernetes_config_map_v1.ca[0].data["ca.pem"] == var.extra_ca_certs_pem,
      alltrue([for role, d in kubernetes_deployment_v1.role :
        anytrue([for m in d.spec[0].template[0].spec[0].container[0].volume_mount : m.name == "ca" && m.mount_path == "/etc/parley-ca"])
      ]),
    ])
    error_message = "extra CAs are mounted where NODE_EXTRA_CA_CERTS points"
  }

  assert {
    condition = alltrue([
      kubernetes_config_map_v1.env.data["PUBLIC_URL"] == "https://chat.example.com",
      kubernetes_config_map_v1.env.data["PUBLIC_WS_URL"] == "wss://chat.example.com/ws",
      kubernetes_config_map_v1.env.data["S3_ENDPOINT"] == "https://minio.storage.svc:9000",
      kubernetes_ingress_v1.api.spec[0].tls[0].secret_name == "parley-tls",
      kubernetes_ingress_v1.gateway.spec[0].tls[0].secret_name == "parley-tls",
    ])
    error_message = "a TLS secret makes the URLs https/wss and terminates TLS on both Ingresses"
  }

  assert {
    condition = nonsensitive(alltrue([
      kubernetes_secret_v1.env.data["S3_ACCESS_KEY_ID"] == "parley",
      kubernetes_secret_v1.env.data["S3_SECRET_ACCESS_KEY"] == "parley-secret",
      kubernetes_secret_v1.env.data["REDIS_URL"] == "rediss://parley:p%40ss%20word@redis.example.internal:6380/0",
    ]))
    error_message = "S3 keys and the Redis ACL user go into the Secret"
  }
}

run "the_mesh_is_found_through_headless_services" {
  command = plan

  assert {
    condition = alltrue([for role, s in kubernetes_service_v1.mesh : alltrue([
      s.spec[0].cluster_ip == "None",
      s.spec[0].publish_not_ready_addresses == true,
      s.spec[0].selector["app.kubernetes.io/component"] == role,
    ])])
    error_message = "each role has a headless Service listing its pods, starting ones included"
  }

  assert {
    condition = kubernetes_config_map_v1.mesh_peers.data["MESH_PEERS"] == join(",", [
      "api=parley-api-mesh.parley.svc.cluster.local.:0",
      "engine=parley-engine-mesh.parley.svc.cluster.local.:2",
      "gateway=parley-gateway-mesh.parley.svc.cluster.local.:0",
      "webhooks=parley-webhooks-mesh.parley.svc.cluster.local.:0",
    ])
    error_message = "every pod looks up every role and waits for the engines only"
  }

  assert {
    condition = alltrue([for role, d in kubernetes_deployment_v1.role :
      anytrue([for e in d.spec[0].template[0].spec[0].container[0].env :
        e.name == "MESH_PEERS" && e.value_from[0].config_map_key_ref[0].name == "parley-mesh-peers"
      ])
    ])
    error_message = "pods read MESH_PEERS from the untracked ConfigMap, so an engine count change restarts no other role"
  }

  assert {
    condition = alltrue([for role, d in kubernetes_deployment_v1.role :
      anytrue([for e in d.spec[0].template[0].spec[0].container[0].env : e.name == "POD_IP" && e.value_from[0].field_ref[0].field_path == "status.podIP"])
    ])
    error_message = "the node is named after its pod IP (downward API)"
  }

  assert {
    condition     = kubernetes_network_policy_v1.mesh[0].spec[0].ingress[1].ports[0].port == "mesh" && kubernetes_network_policy_v1.mesh[0].spec[0].ingress[1].from[0].pod_selector[0].match_labels["app.kubernetes.io/instance"] == "parley"
    error_message = "only the deployment's own pods reach the mesh port"
  }
}

run "ws_route_and_autoscalers" {
  command = plan

  assert {
    condition = alltrue([
      kubernetes_ingress_v1.gateway.spec[0].rule[0].http[0].path[0].path == "/ws",
      kubernetes_ingress_v1.gateway.spec[0].rule[0].http[0].path[0].backend[0].service[0].name == "parley-gateway",
      kubernetes_ingress_v1.gateway.metadata[0].annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600",
      kubernetes_ingress_v1.gateway.metadata[0].annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"] == "3600",
      kubernetes_ingress_v1.api.spec[0].rule[0].http[0].path[0].path == "/",
      kubernetes_ingress_v1.api.spec[0].rule[0].http[0].path[0].backend[0].service[0].name == "parley-api",
      kubernetes_ingress_v1.api.metadata[0].annotations["nginx.ingress.kubernetes.io/proxy-body-size"] == "9m",
      kubernetes_ingress_v1.metrics.spec[0].rule[0].http[0].path[0].path == "/metrics",
      kubernetes_ingress_v1.metrics.spec[0].rule[0].http[0].path[0].path_type == "Exact",
      kubernetes_ingress_v1.metrics.metadata[0].annotations["nginx.ingress.kubernetes.io/denylist-source-range"] == "0.0.0.0/0,::/0",
    ])
    error_message = "/ws goes to the gateways with long timeouts, /metrics is refused, the rest goes to the api nodes"
  }

  assert {
    condition = alltrue([
      join(",", sort(keys(kubernetes_horizontal_pod_autoscaler_v2.client))) == "api,gateway",
      kubernetes_horizontal_pod_autoscaler_v2.client["api"].spec[0].scale_target_ref[0].name == "parley-api",
      kubernetes_horizontal_pod_autoscaler_v2.client["gateway"].spec[0].min_replicas == 2,
      kubernetes_horizontal_pod_autoscaler_v2.client["gateway"].spec[0].metric[0].resource[0].target[0].average_utilization == 60,
      local.replicas["api"] == null && local.replicas["gateway"] == null,
    ])
    error_message = "api and gateway are autoscaled, and their Deployments leave the count to the autoscaler"
  }
}

run "refuses_a_contact_point_without_port" {
  command = plan

  variables {
    cassandra_contact_points = ["scylla-client.scylla.svc"]
  }

  expect_failures = [var.cassandra_contact_points]
}

run "refuses_resources_missing_a_role" {
  command = plan

  variables {
    resources = {
      api    = { requests = { cpu = "1", memory = "1Gi" }, limits = { memory = "1Gi" } }
      engine = { requests = { cpu = "1", memory = "1Gi" }, limits = { memory = "1Gi" } }
    }
  }

  expect_failures = [var.resources]
}

run "refuses_a_redis_url_with_credentials" {
  command = plan

  variables {
    redis_url = "redis://:secret@redis:6379"
  }

  expect_failures = [var.redis_url]
}

run "refuses_an_s3_key_without_its_secret" {
  command = plan

  variables {
    s3_access_key_id = "parley"
  }

  expect_failures = [kubernetes_secret_v1.env]
}

run "refuses_extra_environment_that_shadows_a_managed_variable" {
  command = plan

  variables {
    extra_environment = { PORT = "9090" }
  }

  expect_failures = [kubernetes_config_map_v1.env]
}

run "push_providers_get_their_settings_and_keys_in_the_secret" {
  command = plan

  variables {
    push_notifier            = ["apns", "fcm"]
    apns_key_pem             = "-----BEGIN PRIVATE KEY-----\nMA==\n-----END PRIVATE KEY-----\n"
    apns_key_id              = "ABC123DEFG"
    apns_team_id             = "TEAM123456"
    apns_topic               = "com.example.chat"
    fcm_service_account_json = "{\"type\": \"service_account\"}"
  }

  assert {
    condition = alltrue([
      kubernetes_config_map_v1.env.data["PUSH_NOTIFIER"] == "apns,fcm",
      kubernetes_config_map_v1.env.data["APNS_KEY_ID"] == "ABC123DEFG",
      kubernetes_config_map_v1.env.data["APNS_TEAM_ID"] == "TEAM123456",
      kubernetes_config_map_v1.env.data["APNS_TOPIC"] == "com.example.chat",
      !contains(keys(kubernetes_config_map_v1.env.data), "APNS_KEY"),
      !contains(keys(kubernetes_config_map_v1.env.data), "FCM_SERVICE_ACCOUNT"),
    ])
    error_message = "the providers' settings are in the ConfigMap, their keys are not"
  }

  assert {
    condition = nonsensitive(alltrue([
      kubernetes_secret_v1.env.data["APNS_KEY"] == var.apns_key_pem,
      kubernetes_secret_v1.env.data["FCM_SERVICE_ACCOUNT"] == var.fcm_service_account_json,
    ]))
    error_message = "the APNs key and the service account go into the Secret"
  }
}

run "push_defaults_to_the_log" {
  command = plan

  assert {
    condition = alltrue([
      kubernetes_config_map_v1.env.data["PUSH_NOTIFIER"] == "log",
      !contains(keys(nonsensitive(kubernetes_secret_v1.env.data)), "APNS_KEY"),
    ])
    error_message = "without providers, notifications go to the log and no key is asked for"
  }
}

run "refuses_apns_without_its_key" {
  command = plan

  variables {
    push_notifier = ["apns"]
    apns_key_id   = "ABC123DEFG"
    apns_team_id  = "TEAM123456"
    apns_topic    = "com.example.chat"
  }

  expect_failures = [kubernetes_secret_v1.env]
}
