# The client-facing Services (api, gateway) behind the Ingress, and one headless Service per role
# through which pods find each other's addresses for the mesh.

resource "kubernetes_service_v1" "client" {
  for_each = local.client_roles

  metadata {
    name      = "${var.name_prefix}-${each.key}"
    namespace = local.namespace
    labels    = merge(local.common_labels, local.role_selector[each.key])
  }
  spec {
    type     = "ClusterIP"
    selector = local.role_selector[each.key]
    port {
      name        = "http"
      port        = 80
      target_port = "http"
    }
  }
}

resource "kubernetes_service_v1" "mesh" {
  for_each = local.roles

  metadata {
    name      = local.mesh_service[each.key]
    namespace = local.namespace
    labels    = merge(local.common_labels, local.role_selector[each.key])
  }
  spec {
    # Headless: the name resolves to every pod's own address, which is what a mesh entry names.
    cluster_ip = "None"
    # A pod is ready only once it has heard from the mesh, so the mesh must be found before
    # readiness: starting pods are listed too.
    publish_not_ready_addresses = true
    selector                    = local.role_selector[each.key]
    port {
      name        = "mesh"
      port        = var.mesh_port
      target_port = "mesh"
    }
    # Each process's /metrics, for a Prometheus that discovers targets by Service.
    port {
      name        = "http"
      port        = local.http_port
      target_port = "http"
    }
  }
}

locals {
  ingress_tls = local.tls ? [var.ingress_tls_secret_name] : []
}

# The Connect API and media downloads: everything but /ws. ingress-nginx's defaults (60 s reads)
# suit unary calls; the body limit matches the local front's (docs/cluster.md, "nginx"): the API refuses
# bodies above 8 MiB with its own Connect error, so nginx must let them through to it.
resource "kubernetes_ingress_v1" "api" {
  metadata {
    name      = "${var.name_prefix}-api"
    namespace = local.namespace
    labels    = merge(local.common_labels, local.role_selector["api"])
    annotations = merge(var.ingress_annotations, {
      "nginx.ingress.kubernetes.io/proxy-body-size" = "9m"
    })
  }
  spec {
    ingress_class_name = var.ingress_class_name
    dynamic "tls" {
      for_each = local.ingress_tls
      content {
        hosts       = [var.public_host]
        secret_name = tls.value
      }
    }
    rule {
      host = var.public_host
      http {
        path {
          path      = "/"
          path_type = "Prefix"
          backend {
            service {
              name = kubernetes_service_v1.client["api"].metadata[0].name
              port {
                name = "http"
              }
            }
          }
        }
      }
    }
  }
}

# /ws to the gateways. ingress-nginx passes the Upgrade through by itself; what a WebSocket needs
# is that a quiet connection is not closed after the default 60 s, and that pushes are not
# buffered. A second Ingress so that these timeouts apply to /ws only (ingress-nginx merges the
# two rules of one host into one server).
resource "kubernetes_ingress_v1" "gateway" {
  metadata {
    name      = "${var.name_prefix}-gateway"
    namespace = local.namespace
    labels    = merge(local.common_labels, local.role_selector["gateway"])
    annotations = merge(var.ingress_annotations, {
      "nginx.ingress.kubernetes.io/proxy-read-timeout" = tostring(var.websocket_timeout_seconds)
      "nginx.ingress.kubernetes.io/proxy-send-timeout" = tostring(var.websocket_timeout_seconds)
      "nginx.ingress.kubernetes.io/proxy-buffering"    = "off"
    })
  }
  spec {
    ingress_class_name = var.ingress_class_name
    dynamic "tls" {
      for_each = local.ingress_tls
      content {
        hosts       = [var.public_host]
        secret_name = tls.value
      }
    }
    rule {
      host = var.public_host
      http {
        path {
          path      = "/ws"
          path_type = "Exact"
          backend {
            service {
              name = kubernetes_service_v1.client["gateway"].metadata[0].name
              port {
                name = "http"
              }
            }
          }
        }
      }
    }
  }
}

# Each process's /metrics is for the cluster's Prometheus, not for the internet; the api Ingress's
# "/" would pass it on. ingress-nginx denies per location, so this route answers 403 to everyone.
resource "kubernetes_ingress_v1" "metrics" {
  metadata {
    name      = "${var.name_prefix}-metrics"
    namespace = local.namespace
    labels    = local.common_labels
    annotations = merge(var.ingress_annotations, {
      "nginx.ingress.kubernetes.io/denylist-source-range" = "0.0.0.0/0,::/0"
    })
  }
  spec {
    ingress_class_name = var.ingress_class_name
    dynamic "tls" {
      for_each = local.ingress_tls
      content {
        hosts       = [var.public_host]
        secret_name = tls.value
      }
    }
    rule {
      host = var.public_host
      http {
        path {
          path      = "/metrics"
          path_type = "Exact"
          backend {
            service {
              name = kubernetes_service_v1.client["api"].metadata[0].name
              port {
                name = "http"
              }
            }
          }
        }
      }
    }
  }
}
