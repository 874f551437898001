package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// writeTLSFiles writes, in dir, a CA's certificate (ca.pem) and a server
// certificate it signed for the address 127.0.0.1 only (cert.pem, key.pem).
func writeTLSFiles(t *testing.T, dir string) {
	t.Helper()
	sign := func(tmpl, parent *x509.Certificate, pub, priv any) []byte {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	notBefore, notAfter := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	caKey := newKey()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER := sign(ca, ca, &caKey.PublicKey, caKey)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key := newKey()
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node"},
		NotBefore: notBefore, NotAfter: notAfter,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.pem", "CERTIFICATE", caDER)
	write("cert.pem", "CERTIFICATE", sign(leaf, caCert, &key.PublicKey, caKey))
	write("key.pem", "EC PRIVATE KEY", keyDER)
}

// freeTCPPort returns a loopback port that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestClusterTLSChecksEachNodesAddress: with --cluster, the URL supplies
// TLS but names no node (rediss://:password@, whose host go-redis reads as
// localhost, or any host). Each node's certificate must be checked against
// the address the node is reached at, as for a single server, not all of
// them against the URL's host.
func TestClusterTLSChecksEachNodesAddress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTLSFiles(t, dir)
	tlsPort := freeTCPPort(t)
	srv := redistest.Start(t,
		redistest.WithConfig("tls-port", strconv.Itoa(tlsPort)),
		redistest.WithConfig("tls-cert-file", filepath.Join(dir, "cert.pem")),
		redistest.WithConfig("tls-key-file", filepath.Join(dir, "key.pem")),
		redistest.WithConfig("tls-ca-cert-file", filepath.Join(dir, "ca.pem")),
		redistest.WithConfig("tls-auth-clients", "no"),
		// The node announces its address and TLS port in CLUSTER SLOTS
		// (alone, it would not know its address).
		redistest.WithConfig("tls-cluster", "yes"),
		redistest.WithConfig("cluster-announce-ip", "127.0.0.1"),
		redistest.WithConfig("cluster-enabled", "yes"),
		redistest.WithConfig("cluster-config-file", "nodes.conf"),
	)
	// A cluster of this one node, through its plain port.
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Do(ctx, "cluster", "addslotsrange", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the cluster's state to be ok", func() bool {
		info, _ := rdb.ClusterInfo(ctx).Result()
		return strings.Contains(info, "cluster_state:ok")
	})

	env := baseEnv("SSL_CERT_FILE=" + filepath.Join(dir, "ca.pem"))
	node := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	for _, url := range []string{"rediss://", "rediss://elsewhere.invalid"} {
		dlockRun(t, env, "--redis", url, "--cluster", node, "list").want(t, 0)
	}
}

// TestTLSURLToPlainPort: rediss:// pointed at a port that speaks plain text
// gets no answer to its TLS handshake (Redis waits for the end of what it
// takes for an inline command). dlock exits 69 saying that the server
// answers in plain text, not only that a deadline passed; and says so
// once it has found out, not after the whole limit of the first ping.
func TestTLSURLToPlainPort(t *testing.T) {
	t.Parallel()
	started := time.Now()
	r := dlockRun(t, nil, "--redis", "rediss://"+shared.Addr(), "list").want(t, exitUnavailable)
	if !strings.Contains(r.stderr, "plain text") || !strings.Contains(r.stderr, "redis://"+shared.Addr()) {
		t.Errorf("stderr %q: want it to say the server answers in plain text, at redis://%s", r.stderr, shared.Addr())
	}
	if took := time.Since(started); took >= pingTimeout-time.Second {
		t.Errorf("dlock told of the plain-text port %v after it started, near the %v ping limit", took.Round(time.Millisecond), pingTimeout)
	}
}
