# Autoscalers for the stateless client-facing roles, and disruption budgets for every role.

locals {
  autoscaling = {
    api     = var.api_autoscaling
    gateway = var.gateway_autoscaling
  }
}

resource "kubernetes_horizontal_pod_autoscaler_v2" "client" {
  for_each = local.client_roles

  metadata {
    name      = "${var.name_prefix}-${each.key}"
    namespace = local.namespace
    labels    = merge(local.common_labels, local.role_selector[each.key])
  }
  spec {
    min_replicas = local.autoscaling[each.key].min_replicas
    max_replicas = local.autoscaling[each.key].max_replicas

    scale_target_ref {
      api_version = "apps/v1"
      kind        = "Deployment"
      name        = kubernetes_deployment_v1.role[each.key].metadata[0].name
    }

    metric {
      type = "Resource"
      resource {
        name = "cpu"
        target {
          type                = "Utilization"
          average_utilization = local.autoscaling[each.key].target_cpu_utilization
        }
      }
    }

    behavior {
      # A removed api pod costs nothing; a removed gateway closes every socket it holds, whose
      # clients reconnect at once and resume from their last sn: one pod a minute at most, after
      # the load stayed low for the whole window.
      scale_down {
        stabilization_window_seconds = local.autoscaling[each.key].scale_down_stabilization_seconds
        select_policy                = "Min"
        policy {
          type           = "Pods"
          value          = 1
          period_seconds = 60
        }
      }
      scale_up {
        stabilization_window_seconds = 0
        select_policy                = "Max"
        policy {
          type           = "Percent"
          value          = 100
          period_seconds = 30
        }
      }
    }
  }
}

# Voluntary disruptions (node drains, upgrades) take one pod of a role at a time: each leaves the
# mesh cleanly and its work moves before the next one goes.
resource "kubernetes_pod_disruption_budget_v1" "role" {
  for_each = local.roles

  metadata {
    name      = "${var.name_prefix}-${each.key}"
    namespace = local.namespace
    labels    = merge(local.common_labels, local.role_selector[each.key])
  }
  spec {
    max_unavailable = "1"
    selector {
      match_labels = local.role_selector[each.key]
    }
  }
}

# The mesh port takes Moleculer packets from anyone who reaches it, and they call any action
# (there is no authentication on the mesh): only this deployment's pods may. The HTTP port stays
# open to the ingress controller, probes and Prometheus.
resource "kubernetes_network_policy_v1" "mesh" {
  count = var.network_policy_enabled ? 1 : 0

  metadata {
    name      = "${var.name_prefix}-mesh"
    namespace = local.namespace
    labels    = local.common_labels
  }
  spec {
    pod_selector {
      match_labels = local.instance_selector
    }
    policy_types = ["Ingress"]

    ingress {
      ports {
        port     = "http"
        protocol = "TCP"
      }
    }

    ingress {
      ports {
        port     = "mesh"
        protocol = "TCP"
      }
      from {
        pod_selector {
          match_labels = local.instance_selector
        }
      }
    }
  }
}
