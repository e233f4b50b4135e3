terraform {
  # 1.8 is the first OpenTofu with mock providers in `tofu test` (Terraform has them since 1.7),
  # which tests/ uses to plan the whole deployment without a cluster.
  required_version = ">= 1.8.0"

  required_providers {
    kubernetes = {
      source = "hashicorp/kubernetes"
      # Checked against 3.2.1 (built from the module proxy; see scripts/infra/tofu.ts). 3.x is the
      # line whose *_v1 resources and autoscaling/v2 HPA this configuration uses; 4.0 may drop
      # what 3.0 deprecated.
      version = ">= 3.2.1, < 4.0.0"
    }
  }
}

# Without settings the provider reads KUBE_CONFIG_PATH / KUBE_CTX or, inside a pod, the in-cluster
# service account: the same configuration applies from a laptop or from a CI runner.
provider "kubernetes" {
  config_path    = var.kubeconfig_path
  config_context = var.kubeconfig_context
}
