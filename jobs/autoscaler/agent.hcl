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
}

strategy "gpu-queue" {
  driver = "gpu-queue"
}

# Cloud targets for the node groups; keep only the one you use.
target "aws-asg" {
  driver = "aws-asg"
  config = {
    aws_region = "us-east-1"
  }
}

target "gce-mig" {
  driver = "gce-mig"
}

target "azure-vmss" {
  driver = "azure-vmss"
  config = {
    subscription_id = "00000000-0000-0000-0000-000000000000"
  }
}
