# The inference service of inference.nomad.hcl for clusters that run
# Consul: registered in Consul's catalog (provider = "consul") with the same
# HTTP health check, so other Consul services find it by DNS,
# and scaled on its request queue. Each instance holds one MPS share: part
# of a GPU's SMs and memory, behind that GPU's MPS daemon; the gpu driver
# kills an instance that uses more GPU memory than its share.
#
# The server here is a stand-in (python3's http.server answering /health);
# replace the command with yours (vLLM, Triton, TGI) and keep the port.
# Run: nomad job run jobs/inference/inference-consul.nomad.hcl
#      consul catalog services; dig @127.0.0.1 -p 8600 inference-consul.service.consul
job "inference-consul" {
  type      = "service"
  node_pool = "inference"
  priority  = 70 # above training's P1: serving preempts batch work, not the reverse

  group "server" {
    count = 2

    # Deregister first, then stop: clients stop sending requests to an
    # instance before it goes.
    shutdown_delay = "5s"

    network {
      port "http" {}
    }

    service {
      name     = "inference-consul"
      provider = "consul"
      port     = "http"

      check {
        type     = "http"
        path     = "/health"
        interval = "5s"
        timeout  = "2s"
      }
    }

    # Horizontal scaling on the request queue with gpu-queue: scale out
    # when requests wait (the query gives the instances needed beyond the
    # current count, from the servers' own queue gauge in Prometheus), scale
    # in after the queue has been empty and the shares' GPU utilisation low
    # for 10 minutes. Needs the autoscaler's apm "prometheus" and strategy
    # "gpu-queue" blocks (jobs/autoscaler/agent.hcl).
    scaling {
      enabled = true
      min     = 1
      max     = 8

      policy {
        evaluation_interval = "15s"
        cooldown            = "1m"

        check "instances-needed" {
          source = "prometheus"
          query  = "ceil(sum(vllm:num_requests_waiting{nomad_job=\"inference\"} or vector(0)) / 4)"
          strategy "gpu-queue" {
            signal       = "nodes_needed"
            pool         = "inference-consul"
            max_scale_up = 2
            boot_time    = "2m"
          }
        }

        check "queued" {
          source = "prometheus"
          query  = "sum(vllm:num_requests_waiting{nomad_job=\"inference\"} or vector(0))"
          strategy "gpu-queue" {
            signal     = "queued"
            pool       = "inference-consul"
            activation = 4
          }
        }

        check "idle" {
          source = "prometheus"
          query  = "avg(nomad_gpu_device_utilization_percent{nomad_job=\"inference\"} or vector(0))"
          strategy "gpu-queue" {
            signal         = "util"
            pool           = "inference-consul"
            floor          = 20
            scale_in_after = "10m"
          }
        }
      }
    }

    task "serve" {
      driver = "gpu"

      config {
        command = "/usr/bin/python3"
        args = ["-c", <<-EOT
          import http.server, os
          print("serving on", os.environ.get("CUDA_VISIBLE_DEVICES"), "with",
                os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "% of its SMs", flush=True)
          class H(http.server.BaseHTTPRequestHandler):
              def do_GET(self):
                  self.send_response(200 if self.path == "/health" else 404)
                  self.end_headers()
                  self.wfile.write(b"ok\n")
              def log_message(self, *a):
                  pass
          http.server.HTTPServer((os.environ["NOMAD_IP_http"], int(os.environ["NOMAD_PORT_http"])), H).serve_forever()
        EOT
        ]
      }

      resources {
        cpu    = 200
        memory = 128

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
