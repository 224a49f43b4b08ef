# ACL policy for the nomad-gpu controller's workload identity (see
# controller.nomad.hcl). It reads the cluster, registers jobs again with a
# changed priority, and keeps the priority ledger and its leader lock in
# variables under nomad-gpu/. Give it the namespaces of the jobs it
# protects ("*" for all).
namespace "*" {
  capabilities = ["read-job", "submit-job", "list-jobs"]

  variables {
    path "nomad-gpu/*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
  }
}

node {
  policy = "read"
}
