# Nomad server for a GPU cluster. Preemption is on for batch and service
# jobs (Nomad enables it only for system jobs by default), so a P0 training
# job or an inference service can take GPUs from lower tiers; the gpu driver
# checkpoints the preempted tasks first. Run: nomad agent -config server.hcl
# (three servers in production: bootstrap_expect = 3 and a retry_join).
data_dir  = "/var/lib/nomad"
bind_addr = "0.0.0.0"

server {
  enabled          = true
  bootstrap_expect = 1

  default_scheduler_config {
    scheduler_algorithm = "binpack" # fill GPU nodes before opening new ones

    preemption_config {
      batch_scheduler_enabled   = true
      service_scheduler_enabled = true
      system_scheduler_enabled  = true
    }
  }
}
