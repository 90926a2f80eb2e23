package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestImage builds the OCI image with scripts/build-image.sh (buildah,
// offline, into a temporary storage) and checks what an operator relies
// on: the config (non-root user, entrypoint, exposed ports, volume,
// labels naming this commit), its size, and the binary in it. This
// machine's sandbox refuses to run containers (podman run fails at
// setrlimit), so the test does not start one: it takes the binary out of
// the image's layer and runs that, with the image's environment.
func TestImage(t *testing.T) {
	if _, err := exec.LookPath("buildah"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("buildah is missing; scripts/ci-deps.sh installs it")
		}
		t.Skip("buildah is not installed")
	}
	store := t.TempDir()
	buildah := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("buildah", append([]string{"--root", store + "/root", "--runroot", store + "/run", "--storage-driver", "vfs"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("buildah %v: %v", args, err)
		}
		return out
	}
	build := exec.Command("bash", "../../scripts/build-image.sh", "dfkv:e2e")
	build.Env = append(os.Environ(), "DFKV_IMAGE_STORAGE="+store, "DFKV_VERSION=e2e-test")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build-image.sh: %v\n%s", err, out)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	var img struct {
		OCIv1 struct {
			Config struct {
				User         string
				Entrypoint   []string
				Cmd          []string
				Env          []string
				ExposedPorts map[string]struct{}
				Volumes      map[string]struct{}
				WorkingDir   string
				Labels       map[string]string
			} `json:"config"`
		}
	}
	if err := json.Unmarshal(buildah("inspect", "--type", "image", "dfkv:e2e"), &img); err != nil {
		t.Fatal(err)
	}
	c := img.OCIv1.Config
	if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/usr/local/bin/dfkv" || strings.Join(c.Cmd, " ") != "server" ||
		c.WorkingDir != "/var/lib/dfkv" {
		t.Fatalf("image config: user %q, entrypoint %v, cmd %v, workdir %q", c.User, c.Entrypoint, c.Cmd, c.WorkingDir)
	}
	for _, p := range []string{"7600/tcp", "7680/tcp", "7700/tcp", "7780/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	if _, ok := c.Volumes["/var/lib/dfkv"]; !ok {
		t.Errorf("no data volume: %v", c.Volumes)
	}
	if c.Labels["org.opencontainers.image.version"] != "e2e-test" || c.Labels["org.opencontainers.image.revision"] != strings.TrimSpace(string(head)) {
		t.Errorf("labels %v", c.Labels)
	}

	// The layer, out of an OCI layout.
	oci := filepath.Join(t.TempDir(), "oci")
	buildah("push", "-q", "dfkv:e2e", "oci:"+oci)
	files, size := imageFiles(t, oci)
	t.Logf("image: %d files, %.1f MB uncompressed", len(files), float64(size)/1e6)
	if size >= 30e6 {
		t.Errorf("the image holds %d bytes; want under 30 MB", size)
	}
	if !bytes.Contains(files["etc/passwd"], []byte("dfkv:x:65532:65532")) || len(files["etc/ssl/certs/ca-certificates.crt"]) == 0 {
		t.Errorf("the image lacks its user or its CA bundle")
	}
	bin := filepath.Join(t.TempDir(), "dfkv")
	if err := os.WriteFile(bin, files["usr/local/bin/dfkv"], 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("the image's binary: %v", err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the image's binary is dynamically linked; FROM scratch has no loader")
		}
	}
	ef.Close()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cleanEnv(), c.Env...)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dfkv %v with the image's environment: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if v := run("version"); !strings.Contains(v, "e2e-test") || !strings.Contains(v, strings.TrimSpace(string(head))) {
		t.Errorf("dfkv version: %s", v)
	}
	if pc := run("server", "--print-config"); !strings.Contains(pc, `server.listen = "0.0.0.0:7600"`) || !strings.Contains(pc, "/var/lib/dfkv/disk0") {
		t.Errorf("server --print-config with the image's environment:\n%s", pc)
	}
	if pc := run("mds", "--print-config"); !strings.Contains(pc, `mds.db_path = "/var/lib/dfkv/mds.db"`) {
		t.Errorf("mds --print-config with the image's environment:\n%s", pc)
	}
}

// imageFiles reads the regular files of every layer of the single image
// in the OCI layout at dir, and their total size.
func imageFiles(t *testing.T, dir string) (map[string][]byte, int64) {
	t.Helper()
	blob := func(digest string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var index struct{ Manifests []struct{ Digest string } }
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil || json.Unmarshal(raw, &index) != nil || len(index.Manifests) != 1 {
		t.Fatalf("OCI index: %v %s", err, raw)
	}
	var manifest struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	var size int64
	for _, l := range manifest.Layers {
		var r io.Reader = bytes.NewReader(blob(l.Digest))
		br := bufio.NewReader(r)
		if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
			zr, err := gzip.NewReader(br)
			if err != nil {
				t.Fatal(err)
			}
			r = zr
		} else {
			r = br
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimPrefix(h.Name, "./")] = b
			size += int64(len(b))
		}
	}
	return files, size
}
