// Command releasecheck checks that the modules of this repository can be
// adopted as published at a version: in a scratch clone of the repository's
// HEAD it tags the root module and every module under extra/ with the
// version, serves them from a local file-based module proxy (the proxy
// protocol's own layout, zips made with golang.org/x/mod/zip), and then, in
// an empty GOPATH and a fresh module, as a user would:
//
//   - go install github.com/dlock-dev/dlock/cmd/dlock@VERSION, and checks that
//     `dlock version` prints VERSION;
//   - for the core and for each extra, go get it at VERSION in a fresh
//     module (as a user adopting one integration does) and builds a program
//     that imports it.
//
// Modules other than dlock's come from the proxies in $GOPROXY (the local
// module cache first). It exits 1, saying which step failed, when a step
// fails: for example when an extra requires a version of the core that is
// not published.
//
// Usage: go run . -version v0.1.0 [-repo DIR] [-keep]
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

const core = "github.com/dlock-dev/dlock"

func main() {
	version := flag.String("version", "", "the version to check, vX.Y.Z")
	repo := flag.String("repo", ".", "the repository to clone")
	keep := flag.Bool("keep", false, "keep the scratch directory")
	flag.Parse()
	if err := run(*version, *repo, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "releasecheck: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("releasecheck: ok")
}

// mod is one module of the repository.
type mod struct {
	path string // module path
	dir  string // directory in the repository, "" for the root
	tag  string // the release tag
}

func run(version, repo string, keep bool) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version %q is not a canonical semantic version (vX.Y.Z)", version)
	}
	tmp, err := os.MkdirTemp("", "dlock-release-check-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("releasecheck: scratch directory", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	clone := filepath.Join(tmp, "repo")
	if _, err := command("", nil, "git", "clone", "-q", "--no-local", repo, clone); err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	rev, err := command(clone, nil, "git", "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	rev = strings.TrimSpace(rev)
	when, err := command(clone, nil, "git", "log", "-1", "--format=%cI", rev)
	if err != nil {
		return err
	}
	mods, err := modules(clone, version)
	if err != nil {
		return err
	}
	proxy := filepath.Join(tmp, "proxy")
	for _, m := range mods {
		if _, err := command(clone, nil, "git", "tag", m.tag, rev); err != nil {
			return fmt.Errorf("tag %s: %w", m.tag, err)
		}
		if err := publish(proxy, clone, rev, strings.TrimSpace(when), m, version); err != nil {
			return fmt.Errorf("serve %s@%s: %w", m.path, version, err)
		}
		fmt.Printf("releasecheck: tagged %s and served %s@%s\n", m.tag, m.path, version)
	}

	// The other modules the published ones need, into this machine's
	// module cache (which the user's proxy list reads first): the user's
	// builds below need not download them again, nor a test run after.
	for _, m := range mods {
		if out, err := command(filepath.Join(clone, filepath.FromSlash(m.dir)), nil, "go", "mod", "download"); err != nil {
			return fmt.Errorf("go mod download in %s: %w\n%s", m.path, err, out)
		}
	}

	env, err := userEnv(tmp, proxy)
	if err != nil {
		return err
	}
	// The CLI, installed as the README says.
	if out, err := command(tmp, env, "go", "install", core+"/cmd/dlock@"+version); err != nil {
		return fmt.Errorf("go install %s/cmd/dlock@%s: %w\n%s", core, version, err, out)
	}
	out, err := command(tmp, env, filepath.Join(tmp, "bin", "dlock"), "version")
	if err != nil {
		return fmt.Errorf("dlock version: %w", err)
	}
	if f := strings.Fields(out); len(f) < 2 || f[0] != "dlock" || f[1] != version {
		return fmt.Errorf("dlock version printed %q, not dlock %s", strings.TrimSpace(out), version)
	}
	fmt.Printf("releasecheck: go install %s/cmd/dlock@%s: ok; dlock version: %s\n", core, version, strings.TrimSpace(out))

	// For each published module, a user's module that gets it alone (as a
	// user adopting one integration does: nothing else in the module
	// graph names the core's version) and builds a program importing it.
	for _, m := range mods {
		if err := adopt(tmp, env, m, version); err != nil {
			return err
		}
		fmt.Printf("releasecheck: go get %s@%s, go build of a program importing it and of all its packages: ok\n", m.path, version)
	}
	return nil
}

// adopt gets m at version in a fresh module, builds a program that imports
// it and every package of the module (but internal ones and commands), and
// checks that the build list has every dlock module at version.
func adopt(tmp string, env []string, m mod, version string) error {
	user := filepath.Join(tmp, "user-"+strings.ReplaceAll(m.path, "/", "_"))
	if err := os.Mkdir(user, 0o755); err != nil {
		return err
	}
	if out, err := command(user, env, "go", "mod", "init", "example.com/releasecheck"); err != nil {
		return fmt.Errorf("go mod init: %w\n%s", err, out)
	}
	if out, err := command(user, env, "go", "get", m.path+"@"+version); err != nil {
		return fmt.Errorf("go get %s@%s: %w\n%s", m.path, version, err, out)
	}
	src := fmt.Sprintf("package main\n\nimport _ %q\n\nfunc main() {}\n", m.path)
	if err := os.WriteFile(filepath.Join(user, "main.go"), []byte(src), 0o644); err != nil {
		return err
	}
	if out, err := command(user, env, "go", "build", "-o", os.DevNull, "."); err != nil {
		return fmt.Errorf("go build of a program importing %s: %w\n%s", m.path, err, out)
	}
	if out, err := command(user, env, "go", "get", m.path+"/...@"+version); err != nil {
		return fmt.Errorf("go get %s/...@%s: %w\n%s", m.path, version, err, out)
	}
	if out, err := command(user, env, "go", "build", m.path+"/..."); err != nil {
		return fmt.Errorf("go build %s/...: %w\n%s", m.path, err, out)
	}
	out, err := command(user, env, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	if err != nil {
		return fmt.Errorf("go list -m all: %w\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		path, v, _ := strings.Cut(line, " ")
		if (path == core || strings.HasPrefix(path, core+"/")) && v != version {
			return fmt.Errorf("%s's build list has %s at %q, not %s", m.path, path, v, version)
		}
	}
	return nil
}

// modules lists the root module and those under extra/.
func modules(clone, version string) ([]mod, error) {
	mods := []mod{{path: core, tag: version}}
	dirs, err := filepath.Glob(filepath.Join(clone, "extra", "*", "go.mod"))
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	for _, gomod := range dirs {
		data, err := os.ReadFile(gomod)
		if err != nil {
			return nil, err
		}
		f, err := modfile.ParseLax(gomod, data, nil)
		if err != nil {
			return nil, err
		}
		dir, _ := filepath.Rel(clone, filepath.Dir(gomod))
		dir = filepath.ToSlash(dir)
		if f.Module == nil || f.Module.Mod.Path != core+"/"+dir {
			return nil, fmt.Errorf("%s: module path is not %s/%s", gomod, core, dir)
		}
		mods = append(mods, mod{path: f.Module.Mod.Path, dir: dir, tag: dir + "/" + version})
	}
	return mods, nil
}

// publish writes m at version into the file-based proxy at dir.
func publish(dir, clone, rev, when string, m mod, version string) error {
	esc, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	at := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(clone, filepath.FromSlash(m.dir), "go.mod"))
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	z, err := os.Create(filepath.Join(at, ev+".zip"))
	if err != nil {
		return err
	}
	zerr := zip.CreateFromVCS(z, module.Version{Path: m.path, Version: version}, clone, rev, m.dir)
	if err := errors.Join(zerr, z.Close()); err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(at, ev+".mod"), gomod, 0o644),
		os.WriteFile(filepath.Join(at, ev+".info"), info, 0o644),
		os.WriteFile(filepath.Join(at, "list"), []byte(version+"\n"), 0o644),
	)
}

// userEnv is the environment of a user with an empty GOPATH, whose module
// proxy serves the release first, then the local module cache, then
// $GOPROXY; the release is not in the checksum database.
func userEnv(tmp, proxy string) ([]string, error) {
	cache, err := command("", nil, "go", "env", "GOMODCACHE")
	if err != nil {
		return nil, err
	}
	goproxy, err := command("", nil, "go", "env", "GOPROXY")
	if err != nil {
		return nil, err
	}
	proxies := []string{fileURL(proxy)}
	// The local module cache second, unless it holds a dlock module (one
	// served by an earlier check, or a real release): that must come from
	// the release's proxy or from $GOPROXY, never from here.
	if c := strings.TrimSpace(cache); c != "" {
		dl := filepath.Join(c, "cache", "download")
		if _, err := os.Stat(filepath.Join(dl, "github.com", "dlock-dev")); errors.Is(err, os.ErrNotExist) {
			proxies = append(proxies, fileURL(dl))
		}
	}
	proxies = append(proxies, strings.TrimSpace(goproxy))
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GO") {
			continue // a user's own settings: only those below
		}
		env = append(env, kv)
	}
	goroot, err := command("", nil, "go", "env", "GOROOT")
	if err != nil {
		return nil, err
	}
	return append(env,
		"GOROOT="+strings.TrimSpace(goroot),
		"GOENV=off", // no go env -w settings (GOPRIVATE...) of this machine
		"GOTOOLCHAIN=local",
		"GOSUMDB=sum.golang.org",
		"GOPATH="+filepath.Join(tmp, "gopath"),
		"GOMODCACHE="+filepath.Join(tmp, "gopath", "pkg", "mod"),
		"GOBIN="+filepath.Join(tmp, "bin"),
		"GOPROXY="+strings.Join(proxies, ","),
		"GONOSUMDB="+core,
		"GOWORK=off",
		"GOFLAGS=-modcacherw",
	), nil
}

func fileURL(path string) string {
	abs, _ := filepath.Abs(path)
	return "file://" + filepath.ToSlash(abs)
}

// command runs name with args in dir (env nil: this process's) and returns
// its combined output.
func command(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
