package httpauth

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const token = "0123456789abcdef-the-token"

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func status(h http.Handler, auth string) int {
	r := httptest.NewRequest("GET", "/metrics", nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestGuard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write(t, path, token+"\n# anything after the first line is ignored\n")
	var logs bytes.Buffer
	g, err := Load(path, "x.http_token_file", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("secret metrics")) }))
	for auth, want := range map[string]int{
		"":                               401,
		"Bearer " + token:                200,
		"bearer " + token:                200,
		"Bearer  " + token + " ":         200,
		"Bearer " + token[:len(token)-1]: 401,
		"Bearer " + token + "x":          401,
		"Basic " + token:                 401,
		"Bearer ":                        401,
		token:                            401,
	} {
		if got := status(h, auth); got != want {
			t.Errorf("Authorization %q: %d, want %d", auth, got, want)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Header().Get("WWW-Authenticate") == "" || strings.Contains(w.Body.String(), "secret") {
		t.Errorf("refusal: header %q body %q", w.Header().Get("WWW-Authenticate"), w.Body.String())
	}

	// A new token takes over when the file changes; the old one stops.
	write(t, path, "a-completely-new-token-value\n")
	future := time.Now().Add(2 * time.Second)
	_ = os.Chtimes(path, future, future)
	g.nextAt.Store(nil)
	if status(h, "Bearer a-completely-new-token-value") != 200 || status(h, "Bearer "+token) != 401 {
		t.Fatal("the changed token file was not taken up")
	}
	// A change that leaves no usable token keeps the last good one, and
	// says so once.
	write(t, path, "short\n")
	future = future.Add(2 * time.Second)
	_ = os.Chtimes(path, future, future)
	for range 3 {
		g.nextAt.Store(nil)
		if status(h, "Bearer a-completely-new-token-value") != 200 {
			t.Fatal("a bad change took the good token away")
		}
	}
	if n := strings.Count(logs.String(), "no usable token"); n != 1 {
		t.Fatalf("the bad change was logged %d times, want once:\n%s", n, logs.String())
	}
	var nilGuard *Guard
	if status(nilGuard.Wrap(h), "") != 401 {
		t.Fatal("a nil guard should pass through to the wrapped handler")
	}
}

func TestLoadRefusesWhatIsNoToken(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"empty": "",
		"short": "tooshort\n",
		"blank": "   \n" + token,
		"long":  strings.Repeat("x", 5000),
	}
	for name, content := range cases {
		p := filepath.Join(dir, name)
		write(t, p, content)
		if _, err := Load(p, "server.http_token_file", nil); err == nil || !strings.Contains(err.Error(), "server.http_token_file") || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want an error naming the setting and the file", name, err)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing"), "server.http_token_file", nil); err == nil {
		t.Error("a missing file was accepted")
	}
}
