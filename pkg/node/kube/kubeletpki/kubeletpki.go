// Package kubeletpki keeps the kubelet's own certificates usable across
// power cuts. The kubelet writes its self-signed serving pair (kubelet.crt,
// kubelet.key), each rotated client certificate and each serving
// certificate it was issued (serverTLSBootstrap) without syncing them:
// a power cut soon after leaves empty or truncated files, and the kubelet
// then fails at every start ("missing content for serving cert") and never
// recovers by itself. Repair runs before each kubelet start
// (kubelet.service's ExecStartPre, `firstboot repair-kubelet`).
package kubeletpki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// Serving pair and client certificate names in layout.KubeletPKIDir.
const (
	servingCert  = "kubelet.crt"
	servingKey   = "kubelet.key"
	clientPrefix = "kubelet-client-"
	serverPrefix = "kubelet-server-"
)

// Repair removes a torn serving pair (EnsureServing makes a new one),
// points a current client certificate that is torn back to the newest
// intact, unexpired one the kubelet wrote before, and does the same for a
// current serving certificate the kubelet was issued (serverTLSBootstrap),
// or removes it when none is intact: the kubelet then asks for a new one
// (a torn one stops it at every start). It says what it did on console
// and returns it, one line per repair.
func Repair(h *host.Host, console io.Writer) ([]string, error) {
	dir := h.Path(layout.KubeletPKIDir)
	var done []string
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		_, _ = fmt.Fprintf(console, "terrarium: %s\n", line) // the returned lines say it too
		done = append(done, line)
	}
	crt, key := filepath.Join(dir, servingCert), filepath.Join(dir, servingKey)
	if exists(crt) || exists(key) {
		if err := usablePair(crt, key); err != nil {
			for _, p := range []string{crt, key} {
				if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
					return done, fmt.Errorf("remove the kubelet's torn serving certificate: %w", err)
				}
			}
			if err := atomicfile.SyncDir(dir); err != nil {
				return done, err
			}
			say("the kubelet's serving certificate (%s, %s) was unusable (%v), torn by a power cut while the kubelet wrote it: removed; a new one is made", servingCert, servingKey, err)
		}
	}
	for _, r := range rotatedCerts() {
		if err := repairRotated(h, dir, r, say); err != nil {
			return done, err
		}
	}
	return done, nil
}

// rotated is a certificate the kubelet rotates itself: files named by
// time (prefix<time>.pem, the certificate and its key), the current one
// behind a link (current, under the host's root).
type rotated struct {
	current, prefix, what string
	// askAgain: the kubelet asks for a new one when there is none
	// current (a serving certificate); a client certificate it cannot
	// ask for without a bootstrap credential.
	askAgain bool
}

func rotatedCerts() []rotated {
	return []rotated{
		{current: layout.KubeletClientCert, prefix: clientPrefix, what: "client certificate"},
		{current: layout.KubeletPKIDir + "/kubelet-server-current.pem", prefix: serverPrefix, what: "serving certificate", askAgain: true},
	}
}

// repairRotated points r's current link back to the newest intact one
// when the current one is unusable, or removes it when none is and the
// kubelet can ask again.
func repairRotated(h *host.Host, dir string, r rotated, say func(string, ...any)) error {
	current := h.Path(r.current)
	if _, err := os.Lstat(current); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := usableClient(current, h.Now())
	if err == nil {
		return nil
	}
	good, ferr := newestRotated(dir, r.prefix, filepath.Base(current), h.Now())
	switch {
	case ferr != nil && r.askAgain:
		if err := os.Remove(current); err != nil {
			return fmt.Errorf("remove the kubelet's unusable %s: %w", r.what, err)
		}
		if err := atomicfile.SyncDir(dir); err != nil {
			return err
		}
		say("the kubelet's %s %s was unusable (%v) and no earlier one is intact: removed; the kubelet asks for a new one", r.what, r.current, err)
		return nil
	case ferr != nil:
		say("the kubelet's %s %s is unusable (%v) and no earlier one is intact: the node cannot authenticate; rejoin it (docs/operations/runbook.md)", r.what, r.current, err)
		return nil
	}
	tmp := current + ".repair"
	_ = os.Remove(tmp) // a leftover of an interrupted repair; Symlink fails if it stays
	if err := os.Symlink(good, tmp); err != nil {
		return fmt.Errorf("repair the kubelet's %s: %w", r.what, err)
	}
	if err := atomicfile.Replace(tmp, current); err != nil {
		return fmt.Errorf("repair the kubelet's %s: %w", r.what, err)
	}
	say("the kubelet's %s %s was unusable (%v), torn by a power cut while the kubelet rotated it: it points to %s again", r.what, r.current, err, good)
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// usablePair reports why a certificate and key file do not make a pair.
func usablePair(crt, key string) error {
	c, err := os.ReadFile(crt)
	if err != nil {
		return err
	}
	k, err := os.ReadFile(key)
	if err != nil {
		return err
	}
	if len(c) == 0 || len(k) == 0 {
		return errors.New("empty")
	}
	_, err = tls.X509KeyPair(c, k)
	return err
}

// usableClient reports why a rotated certificate file (certificate and
// key in one PEM file, the kubelet's client or serving one) cannot be used
// at now.
func usableClient(p string, now time.Time) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return errors.New("empty")
	}
	pair, err := tls.X509KeyPair(b, b)
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("expired %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// newestRotated returns the name of the newest usable certificate named
// prefix<time>.pem in dir other than current (the kubelet names them by
// time, so the name orders them).
func newestRotated(dir, prefix, current string, now time.Time) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, prefix) && strings.HasSuffix(n, ".pem") && n != current && e.Type().IsRegular() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for i := len(names) - 1; i >= 0; i-- {
		if usableClient(filepath.Join(dir, names[i]), now) == nil {
			return names[i], nil
		}
	}
	return "", errors.New("no usable certificate")
}
