package release

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// writeSums writes SHA256SUMS, in sha256sum's format (`sha256sum -c`
// checks it), of every file in dir, and its signature.
func writeSums(key *ecdsa.PrivateKey, dir string) error {
	files, err := releaseFiles(dir)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, f := range files {
		sum, err := fileSHA256(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, f)
	}
	sig, err := SignBlob(key, b.Bytes())
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, SumsFile), b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, SumsSigFile), sig, 0o644)
}

// releaseFiles are the files of dir that SHA256SUMS lists: all but itself
// and its signature, sorted.
func releaseFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.Name() == SumsFile || e.Name() == SumsSigFile {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%s: %s is not a regular file", dir, e.Name())
		}
		files = append(files, e.Name())
	}
	sort.Strings(files)
	return files, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkSums returns an error unless SHA256SUMS lists exactly the files of
// dir, each with its SHA-256.
func checkSums(dir string, sums []byte) error {
	files, err := releaseFiles(dir)
	if err != nil {
		return err
	}
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			return fmt.Errorf("%s: line %q", SumsFile, sc.Text())
		}
		listed[file] = sum
	}
	for _, f := range files {
		want, ok := listed[f]
		if !ok {
			return fmt.Errorf("%s does not list %s", SumsFile, f)
		}
		delete(listed, f)
		got, err := fileSHA256(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s: SHA-256 %s, %s says %s", f, got, SumsFile, want)
		}
	}
	for f := range listed {
		return fmt.Errorf("%s lists %s, which is not there", SumsFile, f)
	}
	return nil
}
