# nomad-autoscaler agent config for GPU capacity: our APM reads the GPU queue
# from Nomad, our strategy turns it into a node count. Copy bin/nomad-gpu-apm
# and bin/gpu-queue into plugin_dir. Run: nomad-autoscaler agent -config agent.hcl
#
# Name the APM anything but "nomad-apm": the agent forces min = 1 on cluster
# policies whose source has that name, and a GPU pool must scale from zero.

plugin_dir = "/opt/nomad-autoscaler/plugins"

nomad {
  address = "http://127.0.0.1:4646"
  # token = "…"  # node:read and read-job in the namespaces the queries read
}

policy {
  dir = "/etc/nomad-autoscaler/policies" # the gpu-pool-*.hcl files here
}

apm "nomad-gpu" {
  driver = "nomad-gpu-apm"
  # Cluster figures for Prometheus (jobs/monitoring/prometheus.yml scrapes
  # them): queue, wait, allocation and fragmentation by pool.
  config = {
    metrics_address = "0.0.0.0:9403"
  }
}

# Prometheus, built into nomad-autoscaler: the inference jobs' horizontal
# policies read their servers' request queue from it
# (jobs/inference/inference.nomad.hcl, jobs/autoscaler/inference-horizontal.nomad.hcl).
apm "prometheus" {
  driver = "prometheus"
  config = {
    address = "http://127.0.0.1:9090"
  }
}

strategy "gpu-queue" {
  driver = "gpu-queue"
  # Every check's runs by result, for Prometheus (jobs/monitoring/prometheus.yml
  # scrapes them): the GPUScalingCheckFailing alert fires on a check that
  # fails on every evaluation, e.g. a strategy block gpu-queue refuses.
  config = {
    metrics_address = "0.0.0.0:9404"
  }
}

# The cloud target of the node groups (gpu-pool-aws.hcl). Every target
# block here is started with the agent and must reach its cloud, so keep
# only the one you use: for gpu-pool-gce.hcl or gpu-pool-azure.hcl, swap in
#
#   target "gce-mig" {
#     driver = "gce-mig"   # Google application default credentials
#   }
#
#   target "azure-vmss" {
#     driver = "azure-vmss"
#     config = {
#       tenant_id         = "…"
#       client_id         = "…"
#       secret_access_key = "…"
#       subscription_id   = "…"
#     }
#   }
target "aws-asg" {
  driver = "aws-asg"
  config = {
    aws_region = "us-east-1"
  }
}
