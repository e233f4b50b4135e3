output "namespace" {
  description = "Namespace the deployment lives in."
  value       = local.namespace
}

output "public_url" {
  description = "PUBLIC_URL the server hands out: the Connect API's base URL."
  value       = local.public_url
}

output "public_ws_url" {
  description = "PUBLIC_WS_URL: the WebSocket URL clients are given."
  value       = local.public_ws_url
}

output "client_services" {
  description = "ClusterIP Services behind the Ingress, by role (port 80)."
  value       = { for role, service in kubernetes_service_v1.client : role => service.metadata[0].name }
}

output "mesh_services" {
  description = "Headless Services listing each role's pods (ports mesh and http, /metrics on the latter)."
  value       = { for role, service in kubernetes_service_v1.mesh : role => service.metadata[0].name }
}

output "termination_grace_period_seconds" {
  description = "Each role's terminationGracePeriodSeconds, derived from drain_timeout_ms and prestop_delay_seconds."
  value       = local.termination_seconds
}
