package harness

import (
	"strings"
	"testing"
)

// The replayed task goes into the jobspec as a quoted HCL string, where
// "${" and "%{" would start a template: the script must have neither.
func TestReplayScriptIsNoHCLTemplate(t *testing.T) {
	for _, seq := range []string{"${", "%{"} {
		if strings.Contains(replayScript, seq) {
			t.Errorf("replayScript contains %q, which HCL reads as a template", seq)
		}
	}
}
