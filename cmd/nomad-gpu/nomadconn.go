package main

import (
	"flag"

	"github.com/hashicorp/nomad/api"
)

// nomadConn is how a command reaches the Nomad API: as the nomad CLI does,
// from NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE and the
// NOMAD_CACERT/NOMAD_CLIENT_CERT/... TLS variables, which its flags
// override.
type nomadConn struct {
	address, token, region, namespace string
}

// addFlags defines -address, -token and -region, and -namespace where
// namespaceUsage is not "" (a command that takes namespaces from
// elsewhere has none).
func (c *nomadConn) addFlags(fs *flag.FlagSet, namespaceUsage string) {
	fs.StringVar(&c.address, "address", "", "Nomad HTTP API address (default $NOMAD_ADDR or http://127.0.0.1:4646)")
	fs.StringVar(&c.token, "token", "", "ACL token (default $NOMAD_TOKEN)")
	fs.StringVar(&c.region, "region", "", "region (default $NOMAD_REGION)")
	if namespaceUsage != "" {
		fs.StringVar(&c.namespace, "namespace", "", namespaceUsage)
	}
}

// config is the environment's API config with the flags applied.
func (c *nomadConn) config() *api.Config {
	cfg := api.DefaultConfig()
	for _, kv := range []struct {
		flag string
		dst  *string
	}{{c.address, &cfg.Address}, {c.token, &cfg.SecretID}, {c.region, &cfg.Region}, {c.namespace, &cfg.Namespace}} {
		if kv.flag != "" {
			*kv.dst = kv.flag
		}
	}
	return cfg
}
