package objtier

import (
	"testing"

	"github.com/dfkv/dfkv/config"
)

// TestConfigKnowsTheHeaderSize: the configuration checks that the upload
// queue holds the largest object, value and header, by its own copy of
// the header's size.
func TestConfigKnowsTheHeaderSize(t *testing.T) {
	if config.ObjectHeaderBytes != HeaderLen {
		t.Fatalf("config.ObjectHeaderBytes %d, the header is %d bytes", config.ObjectHeaderBytes, HeaderLen)
	}
}
