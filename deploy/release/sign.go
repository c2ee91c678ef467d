package release

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ErrBadSignature means a signature does not verify with the key.
var ErrBadSignature = errors.New("signature does not verify")

// ParsePrivateKey reads an unencrypted ECDSA P-256 private key in PEM
// (PKCS #8 "PRIVATE KEY", as `openssl genpkey` writes, or SEC 1 "EC
// PRIVATE KEY"). An encrypted key (cosign's own format) is refused: the
// release key's file is protected by where it lives (docs/release.md).
func ParsePrivateKey(data []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("release key: no PEM block")
	}
	var k any
	var err error
	switch b.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	default:
		return nil, fmt.Errorf("release key: PEM %q: want an unencrypted PRIVATE KEY or EC PRIVATE KEY (docs/release.md)", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("release key: %w", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, errors.New("release key: want ECDSA P-256, what cosign verifies")
	}
	return ec, nil
}

// GenerateKey returns a throwaway P-256 key, for a dry run.
func GenerateKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// MarshalPublicKey is pub as cosign reads a key (`--key cosign.pub`):
// PEM "PUBLIC KEY", PKIX.
func MarshalPublicKey(pub *ecdsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublicKey reads MarshalPublicKey's output.
func ParsePublicKey(data []byte) (*ecdsa.PublicKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PUBLIC KEY" {
		return nil, errors.New("public key: want PEM PUBLIC KEY")
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	ec, ok := k.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, errors.New("public key: want ECDSA P-256")
	}
	return ec, nil
}

// SignBlob signs blob as `cosign sign-blob --key` does: ECDSA over its
// SHA-256, ASN.1 DER, base64 — what `cosign verify-blob --key --signature`
// takes.
func SignBlob(key *ecdsa.PrivateKey, blob []byte) ([]byte, error) {
	sum := sha256.Sum256(blob)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		return nil, err
	}
	return []byte(base64.StdEncoding.EncodeToString(sig)), nil
}

// VerifyBlob checks SignBlob's sig of blob with pub; it returns
// ErrBadSignature when it does not verify.
func VerifyBlob(pub *ecdsa.PublicKey, blob, sig []byte) error {
	der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig)))
	if err != nil {
		return fmt.Errorf("signature: not base64: %w", err)
	}
	sum := sha256.Sum256(blob)
	if !ecdsa.VerifyASN1(pub, sum[:], der) {
		return ErrBadSignature
	}
	return nil
}

// simpleSigning is cosign's payload for an image signature (sigstore's
// payload.SimpleContainerImage, after containers/image's "simple
// signing"): the fields and their order are what cosign writes and reads.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

const cosignSignatureType = "cosign container image signature"

// Payload is the simple-signing payload cosign signs for
// repository@digest: `cosign sign --payload` and `cosign attach signature
// --payload` take it, and `cosign verify` accepts the signature over it.
func Payload(repository string, digest v1.Hash) ([]byte, error) {
	d, err := name.NewDigest(repository+"@"+digest.String(), name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("image %s@%s: %w", repository, digest, err)
	}
	var p simpleSigning
	p.Critical.Identity.DockerReference = d.Repository.Name()
	p.Critical.Image.DockerManifestDigest = d.DigestStr()
	p.Critical.Type = cosignSignatureType
	return json.Marshal(p)
}

// parsePayload returns the repository and digest a payload names.
func parsePayload(data []byte) (string, string, error) {
	var p simpleSigning
	if err := json.Unmarshal(data, &p); err != nil {
		return "", "", fmt.Errorf("payload: %w", err)
	}
	if p.Critical.Type != cosignSignatureType {
		return "", "", fmt.Errorf("payload of type %q, want %q", p.Critical.Type, cosignSignatureType)
	}
	return p.Critical.Identity.DockerReference, p.Critical.Image.DockerManifestDigest, nil
}
