# One Deployment per role. Why Deployments and not StatefulSets, although an engine wants a stable
# NODE_ID (its shard leases and fan-out id slot are held under it): Moleculer's TCP transporter
# keeps, for each peer id, the address that peer first connected from, and never replaces it
# (moleculer/src/transporters/tcp.js, processGossipHello: `if (!node.udpAddress) node.udpAddress =
# socket.remoteAddress`; getNodeAddress prefers it to everything else). A StatefulSet pod comes back
# under its old name with a new pod IP, and every peer would keep dialling the old one. So a node's
# id is tied to its address instead: NODE_ID = <role>-<pod IP> (files/mesh-env.mjs). A container
# restart keeps the pod and its IP, so a crashed engine comes back under the same id and takes its
# leases back at once, which is what the stable id is for. A pod replaced is a new node; the old
# one left the mesh (stopped, or silent past the heartbeat timeout), and a holder the cluster saw
# leave has its leases taken over at once (docs/cluster.md, "Ownership is a lease with an epoch").

locals {
  # api and gateway: the HorizontalPodAutoscaler owns the count (null leaves it to it, and the
  # provider then neither sets nor resets it).
  replicas = {
    api      = null
    gateway  = null
    engine   = tostring(var.engine_replicas)
    webhooks = tostring(var.webhooks_replicas)
  }
}

resource "kubernetes_deployment_v1" "role" {
  for_each = local.roles
  # A pod looks its peers up at start: their Services must answer by then.
  depends_on = [kubernetes_service_v1.mesh]

  metadata {
    name      = "${var.name_prefix}-${each.key}"
    namespace = local.namespace
    labels    = merge(local.common_labels, local.role_selector[each.key])
  }

  spec {
    replicas = local.replicas[each.key]
    # A new engine takes over its share of the shards as it joins; ten seconds lets those moves
    # finish before the rollout stops the next old engine, whose shards then move too.
    min_ready_seconds = each.key == "engine" ? 10 : 0

    selector {
      match_labels = local.role_selector[each.key]
    }

    strategy {
      type = "RollingUpdate"
      rolling_update {
        # Capacity never drops during a rollout; one new process at a time for the roles whose
        # membership changes move work (engine shards, webhook partitions).
        max_surge       = contains(local.client_roles, each.key) ? "25%" : "1"
        max_unavailable = "0"
      }
    }

    template {
      metadata {
        labels = merge(local.common_labels, local.role_selector[each.key])
        annotations = merge(
          var.prometheus_scrape_annotations ? {
            "prometheus.io/scrape" = "true"
            "prometheus.io/port"   = tostring(local.http_port)
            "prometheus.io/path"   = "/metrics"
          } : {},
          {
            # A changed setting restarts the pods (rolling): processes read them only at start.
            "parley.dev/env-version"    = kubernetes_config_map_v1.env.metadata[0].resource_version
            "parley.dev/secret-version" = kubernetes_secret_v1.env.metadata[0].resource_version
            "parley.dev/mesh-version"   = kubernetes_config_map_v1.mesh.metadata[0].resource_version
          },
          { for ca in kubernetes_config_map_v1.ca : "parley.dev/ca-version" => ca.metadata[0].resource_version },
        )
      }

      spec {
        service_account_name             = kubernetes_service_account_v1.parley.metadata[0].name
        automount_service_account_token  = false
        termination_grace_period_seconds = local.termination_seconds[each.key]
        # Kubernetes would add <SERVICE>_PORT=tcp://… for every Service in the namespace; the
        # server reads plain names (PORT among them), so none of those may leak in.
        enable_service_links = false
        node_selector        = var.node_selector

        dynamic "image_pull_secrets" {
          for_each = var.image_pull_secrets
          content {
            name = image_pull_secrets.value
          }
        }

        dynamic "toleration" {
          for_each = var.tolerations
          content {
            key      = toleration.value.key
            operator = toleration.value.operator
            value    = toleration.value.value
            effect   = toleration.value.effect
          }
        }

        # Replicas of a role on different nodes where possible: losing a node then costs each role
        # a share, not all of it.
        topology_spread_constraint {
          max_skew           = 1
          topology_key       = "kubernetes.io/hostname"
          when_unsatisfiable = "ScheduleAnyway"
          label_selector {
            match_labels = local.role_selector[each.key]
          }
        }

        security_context {
          run_as_non_root = true
          run_as_user     = var.run_as_user
          run_as_group    = var.run_as_user
          fs_group        = var.run_as_user
          seccomp_profile {
            type = "RuntimeDefault"
          }
        }

        container {
          name              = "parley"
          image             = var.image
          image_pull_policy = var.image_pull_policy
          working_dir       = var.working_dir
          # start.sh sets NODE_ID and TRANSPORTER, then execs the server (args), which so receives
          # SIGTERM itself and drains.
          command = ["/bin/sh", "/etc/parley-mesh/start.sh"]
          args    = var.command

          port {
            name           = "http"
            container_port = local.http_port
          }
          port {
            name           = "mesh"
            container_port = var.mesh_port
          }

          env_from {
            config_map_ref {
              name = kubernetes_config_map_v1.env.metadata[0].name
            }
          }
          env_from {
            secret_ref {
              name = kubernetes_secret_v1.env.metadata[0].name
            }
          }
          env {
            name  = "ROLES"
            value = each.key
          }
          env {
            name = "POD_IP"
            value_from {
              field_ref {
                field_path = "status.podIP"
              }
            }
          }
          env {
            name  = "MESH_ROLE"
            value = each.key
          }
          env {
            name  = "MESH_PORT"
            value = tostring(var.mesh_port)
          }
          # From a ConfigMap no annotation tracks: read once at start, so scaling the engines
          # (their count is in it) restarts no other role's pods.
          dynamic "env" {
            for_each = ["MESH_PEERS", "MESH_WAIT_SECONDS"]
            content {
              name = env.value
              value_from {
                config_map_key_ref {
                  name = kubernetes_config_map_v1.mesh_peers.metadata[0].name
                  key  = env.value
                }
              }
            }
          }

          resources {
            requests = {
              cpu    = var.resources[each.key].requests.cpu
              memory = var.resources[each.key].requests.memory
            }
            limits = merge(
              { memory = var.resources[each.key].limits.memory },
              var.resources[each.key].limits.cpu == null ? {} : { cpu = var.resources[each.key].limits.cpu },
            )
          }

          # The port opens only once the process is ready (it has heard from the mesh, the engines'
          # actions are known, an engine finished what its last run left), so /healthz answers
          # nothing before that; the first start against an empty keyspace also applies the schema.
          startup_probe {
            http_get {
              path = "/healthz"
              port = "http"
            }
            period_seconds    = 5
            timeout_seconds   = 3
            failure_threshold = ceil(var.startup_timeout_seconds / 5)
          }

          # 503 from the moment SIGTERM arrives, and while the process cannot serve what its role
          # serves (an api node that reaches no engine, an engine kept from shards placed on it or
          # unable to renew its leases): out of the Service at once.
          readiness_probe {
            http_get {
              path = "/healthz"
              port = "http"
            }
            period_seconds    = 5
            timeout_seconds   = 3
            failure_threshold = 1
            success_threshold = 1
          }

          # /livez depends on nothing outside the process (a Cassandra outage or an engine move is
          # answered per request and by /healthz, not by restarts), so failing it means the process
          # itself is wedged. It refuses connections once the drain ends: the threshold outlasts the
          # whole termination grace, so even a kubelet that kept probing a pod being deleted could
          # not cut its drain short.
          liveness_probe {
            http_get {
              path = "/livez"
              port = "http"
            }
            period_seconds    = 10
            timeout_seconds   = 5
            failure_threshold = max(3, ceil(local.termination_seconds[each.key] / 10) + 1)
          }

          dynamic "lifecycle" {
            for_each = local.prestop_seconds[each.key] > 0 ? [local.prestop_seconds[each.key]] : []
            content {
              # Endpoints of a pod being deleted leave the ingress controller's upstreams a moment
              # after the kubelet is told; until then it keeps sending requests, which the server,
              # still undisturbed, serves. Node is what the image surely has to wait with.
              pre_stop {
                exec {
                  command = ["node", "-e", "setTimeout(() => {}, ${lifecycle.value * 1000})"]
                }
              }
            }
          }

          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            capabilities {
              drop = ["ALL"]
            }
          }

          volume_mount {
            name       = "tmp"
            mount_path = "/tmp"
          }
          volume_mount {
            name       = "mesh"
            mount_path = "/etc/parley-mesh"
            read_only  = true
          }
          dynamic "volume_mount" {
            for_each = kubernetes_config_map_v1.ca
            content {
              name       = "ca"
              mount_path = "/etc/parley-ca"
              read_only  = true
            }
          }
        }

        volume {
          name = "tmp"
          empty_dir {
            size_limit = var.tmp_volume_size_limit
          }
        }
        volume {
          name = "mesh"
          config_map {
            name = kubernetes_config_map_v1.mesh.metadata[0].name
          }
        }
        dynamic "volume" {
          for_each = kubernetes_config_map_v1.ca
          content {
            name = "ca"
            config_map {
              name = volume.value.metadata[0].name
            }
          }
        }
      }
    }
  }
}
