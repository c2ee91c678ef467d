package release

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestPayloadIsCosigns: the payload is byte for byte what cosign signs for
// an image (sigstore's payload.Cosign marshalled: critical.identity,
// critical.image, critical.type, then optional null).
func TestPayloadIsCosigns(t *testing.T) {
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	got, err := Payload("ghcr.io/skewgate/skewgate", d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"critical":{"identity":{"docker-reference":"ghcr.io/skewgate/skewgate"},"image":{"docker-manifest-digest":"sha256:` +
		d.Hex + `"},"type":"cosign container image signature"},"optional":null}`
	if string(got) != want {
		t.Errorf("payload\n%s\nwant\n%s", got, want)
	}
	repo, digest, err := parsePayload(got)
	if err != nil || repo != "ghcr.io/skewgate/skewgate" || digest != d.String() {
		t.Errorf("parsed %s %s %v", repo, digest, err)
	}
	if _, err := Payload("skewgate", d); err == nil {
		t.Error("a repository without a registry (docker.io/library/…) was signed")
	}
}

func TestSignAndVerifyBlob(t *testing.T) {
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := MarshalPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := SignBlob(key, []byte("blob"))
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyBlob(pub, []byte("blob"), append(sig, '\n')); err != nil {
		t.Errorf("own signature: %v", err)
	}
	if err := VerifyBlob(pub, []byte("blob!"), sig); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another blob: %v, want ErrBadSignature", err)
	}
	other, _ := GenerateKey()
	if err := VerifyBlob(&other.PublicKey, []byte("blob"), sig); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another key: %v, want ErrBadSignature", err)
	}
}

// TestParsePrivateKey: the PEM forms openssl writes for P-256 are read;
// another curve, an encrypted key and a public key are refused.
func TestParsePrivateKey(t *testing.T) {
	key, _ := GenerateKey()
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(key)
	sec1, _ := x509.MarshalECPrivateKey(key)
	for typ, der := range map[string][]byte{"PRIVATE KEY": pkcs8, "EC PRIVATE KEY": sec1} {
		k, err := ParsePrivateKey(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
		if err != nil || !k.Equal(key) {
			t.Errorf("%s: %v", typ, err)
		}
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	der384, _ := x509.MarshalPKCS8PrivateKey(p384)
	for what, data := range map[string][]byte{
		"P-384":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der384}),
		"encrypted": pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: []byte("x")}),
		"not PEM":   []byte("key"),
	} {
		if _, err := ParsePrivateKey(data); err == nil {
			t.Errorf("%s key accepted", what)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v0.2.0": true, "v1.10.3": true, "v1.0.0-rc.1": true,
		"0.2.0": false, "v0.2": false, "v01.2.3": false, "v0.1.0-3-gabcdef": false,
		"v0.1.0-dirty": false, "": false, "v1.2.3+meta": false,
	} {
		if err := CheckVersion(v); (err == nil) != ok {
			t.Errorf("CheckVersion(%q) = %v", v, err)
		}
	}
}
