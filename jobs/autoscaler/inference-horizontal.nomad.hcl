# Horizontal scaling of an inference service on its request queue. Each
# instance holds one MPS share of a GPU; nomad-autoscaler adds instances when
# requests wait and removes them when the queue stays short.
#
# The queue is the server's own gauge of waiting requests (vLLM exports
# vllm:num_requests_waiting), read from Prometheus: target-value keeps about
# 4 waiting requests per instance. Instances that find no free MPS share
# queue for one like any GPU work; a cluster policy like gpu-pool-*.hcl
# (which scale the training pool) with its queries on node_pool=inference
# adds nodes for them: the two policies together grow the service and the
# GPUs under it.
#
# Needs the apm "prometheus" block of jobs/autoscaler/agent.hcl.
# Run: nomad job run jobs/autoscaler/inference-horizontal.nomad.hcl
job "inference" {
  type      = "service"
  node_pool = "inference"

  group "server" {
    count = 1

    scaling {
      enabled = true
      min     = 1
      max     = 16

      policy {
        evaluation_interval = "15s"
        cooldown            = "1m"

        check "waiting-requests" {
          source = "prometheus"
          query  = "sum(vllm:num_requests_waiting{nomad_job=\"inference\"}) or vector(0)"
          strategy "target-value" {
            target = 4
          }
        }
      }
    }

    network {
      port "http" {
        to = 8000
      }
    }

    task "vllm" {
      driver = "gpu"

      config {
        command = "/opt/vllm/bin/vllm"
        args    = ["serve", "/models/llama-3-8b", "--port", "${NOMAD_PORT_http}"]
      }

      resources {
        cpu    = 2000
        memory = 16384

        device "nvidia/mps" {
          count = 1
          # Fill one GPU's shares before opening the next: a GPU whose shares
          # are partly in use scores higher (the device plugin's shares_in_use).
          affinity {
            attribute = "${device.attr.unique.shares_in_use}"
            operator  = ">"
            value     = "0"
            weight    = 100
          }
        }
      }
    }
  }
}
