package handlers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
)

// The operator console: server-rendered pages (html/template) under
// /console, their stylesheet embedded in the binary, no script and nothing
// fetched from elsewhere. It is for admins only: a page needs a console
// session (made by logging in with an admin token) or an admin bearer
// credential. The token itself is never rendered or kept in the browser: the
// session cookie holds a random ID, HttpOnly and SameSite=Strict. Every
// POST also passes net/http's CrossOriginProtection (Sec-Fetch-Site, else
// Origin against Host), so another site cannot act through an operator's
// session.

//go:embed console
var consoleFS embed.FS

// consoleCookie names the console session cookie.
const consoleCookie = "fencegate_console"

// Console session bounds: a session lasts ConsoleSessionTTL from login; at
// most maxConsoleSessions live at once (the oldest goes first).
const (
	ConsoleSessionTTL  = 8 * time.Hour
	maxConsoleSessions = 256
)

// consoleSessions holds live console sessions in memory, by the SHA-256 of
// their cookie value. A restart (or another replica) knows none of them:
// the operator logs in again.
type consoleSessions struct {
	mu   sync.Mutex
	byID map[[32]byte]consoleSession
}

type consoleSession struct {
	identity string
	expires  time.Time
	// flash is what the last console action did, shown once by the page
	// it redirects to. It lives here, not in the redirect's query, so that
	// a link cannot make the console claim a change nobody made.
	flash string
}

func (c *consoleSessions) create(identity string, now time.Time) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := hex.EncodeToString(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[[32]byte]consoleSession{}
	}
	for k, s := range c.byID {
		if !now.Before(s.expires) {
			delete(c.byID, k)
		}
	}
	for len(c.byID) >= maxConsoleSessions {
		var oldest [32]byte
		first := true
		for k, s := range c.byID {
			if first || s.expires.Before(c.byID[oldest].expires) {
				oldest, first = k, false
			}
		}
		delete(c.byID, oldest)
	}
	c.byID[sha256.Sum256([]byte(v))] = consoleSession{identity: identity, expires: now.Add(ConsoleSessionTTL)}
	return v
}

func (c *consoleSessions) lookup(v string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.byID[sha256.Sum256([]byte(v))]
	if !ok || !now.Before(s.expires) {
		return "", false
	}
	return s.identity, true
}

// swapFlash puts msg in session v's flash and returns what was there.
func (c *consoleSessions) swapFlash(v, msg string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := sha256.Sum256([]byte(v))
	s, ok := c.byID[k]
	if !ok {
		return ""
	}
	prev := s.flash
	s.flash = msg
	c.byID[k] = s
	return prev
}

// flash keeps msg for the next page of r's session; takeFlash reads it once.
func (s *Server) flash(r *http.Request, msg string) {
	if c, err := r.Cookie(consoleCookie); err == nil {
		s.sessions.swapFlash(c.Value, msg)
	}
}

func (s *Server) takeFlash(r *http.Request) string {
	if c, err := r.Cookie(consoleCookie); err == nil {
		return s.sessions.swapFlash(c.Value, "")
	}
	return ""
}

func (c *consoleSessions) drop(v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, sha256.Sum256([]byte(v)))
}

// consoleRoutes mounts the console.
func (s *Server) consoleRoutes(r chi.Router) {
	s.csrf = http.NewCrossOriginProtection()
	static, _ := fs.Sub(consoleFS, "console/static")
	r.Route("/console", func(r chi.Router) {
		r.Use(s.consoleHeaders, s.consoleSameOrigin)
		r.Handle("/static/*", http.StripPrefix("/console/static/", http.FileServerFS(static)))
		r.Get("/login", s.consoleLoginPage)
		r.Post("/login", s.consoleLogin)
		r.Group(func(r chi.Router) {
			r.Use(s.consoleOnly)
			r.Post("/logout", s.consoleLogout)
			r.Get("/", s.consoleHome)
			r.Get("/search", s.consoleSearch)
			r.Get("/resource", s.consoleResource)
			r.Get("/segment", s.consoleSegment)
			r.Get("/receipt", s.consoleReceipt)
			r.Get("/operation", s.consoleOperation)
			r.Get("/unknown", s.consoleUnknown)
			r.Post("/unknown/{receiptId}/resolve", s.consoleResolve)
			r.Get("/quarantine", s.consoleQuarantineList)
			r.Get("/quarantine/{id}", s.consoleQuarantine)
			r.Get("/shadow", s.consoleShadow)
			r.Get("/modes", s.consoleModes)
			r.Post("/modes", s.consoleSetMode)
			r.Get("/trust", s.consoleTrust)
		})
	})
	r.Get("/console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusFound)
	})
}

// consoleHeaders keeps console pages out of caches and frames and lets them
// load nothing but their own stylesheet.
func (s *Server) consoleHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// consoleSameOrigin refuses a cross-origin POST (CSRF) with FORBIDDEN.
func (s *Server) consoleSameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.csrf.Check(r); err != nil {
			s.consoleError(w, r, fencegate.Errorf(fencegate.CodeForbidden, "cross-origin request refused: %v", err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// consoleOnly admits a live console session or an admin bearer credential
// and puts "admin:<identity>" in the context, as adminOnly does. A browser
// without either is sent to the login page.
func (s *Server) consoleOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.consoleCaller(r)
		if err != nil {
			if r.Method == http.MethodGet && !hasAuthorization(r) {
				http.Redirect(w, r, "/console/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.consoleError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, "admin:"+id)))
	})
}

func (s *Server) consoleCaller(r *http.Request) (string, error) {
	if s.AdminAuth == nil {
		return "", fencegate.Errorf(fencegate.CodeForbidden, "no admin credentials are configured")
	}
	if hasAuthorization(r) {
		return s.AdminAuth.Authenticate(r)
	}
	if c, err := r.Cookie(consoleCookie); err == nil {
		if id, ok := s.sessions.lookup(c.Value, s.Now()); ok {
			return id, nil
		}
	}
	return "", fencegate.Errorf(fencegate.CodeUnauthenticated, "log in to the console with an admin token")
}

func (s *Server) consoleLoginPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// consoleLogin checks the admin token posted by the login form and starts a
// session; the token is not kept.
func (s *Server) consoleLogin(w http.ResponseWriter, r *http.Request) {
	if err := consoleForm(w, r); err != nil {
		s.consoleError(w, r, err)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if s.AdminAuth == nil {
		s.consoleError(w, r, fencegate.Errorf(fencegate.CodeForbidden, "no admin credentials are configured"))
		return
	}
	probe, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "/", nil)
	probe.Header.Set("Authorization", "Bearer "+strings.TrimSpace(r.PostForm.Get("token")))
	id, err := s.AdminAuth.Authenticate(probe)
	if err != nil {
		s.Log.Info("console login refused", "remote", r.RemoteAddr)
		s.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": "That is not an admin token."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: s.sessions.create(id, s.Now()), Path: "/console",
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int(ConsoleSessionTTL / time.Second)})
	s.Log.Info("console login", "caller", "admin:"+id, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) consoleLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(consoleCookie); err == nil {
		s.sessions.drop(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: "/console", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	s.Log.Info("console logout", "caller", callerOf(r))
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// safeNext keeps a post-login destination inside the console: a path of
// this origin under /console/ with no dot segments, plain or percent-encoded
// (a browser resolves /console/%2e%2e/ as /console/../, RFC 3986 §5.2.4).
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || strings.HasPrefix(next, "//") ||
		strings.ContainsAny(next, "\\\r\n") || !strings.HasPrefix(u.Path, "/console/") {
		return "/console/"
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return "/console/"
		}
	}
	return next
}

// consolePages are the parsed page templates, each the layout plus its page.
var consolePages = func() map[string]*template.Template {
	layout := template.Must(template.New("layout.html").Funcs(consoleFuncs).ParseFS(consoleFS, "console/layout.html"))
	pages := map[string]*template.Template{}
	names, _ := fs.Glob(consoleFS, "console/page_*.html")
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "console/page_"), ".html")
		pages[name] = template.Must(template.Must(layout.Clone()).ParseFS(consoleFS, n))
	}
	return pages
}()

// render answers the page name with data under the layout.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, data map[string]any) {
	t, ok := consolePages[name]
	if !ok {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeInternal, "no console page %q", name))
		return
	}
	if data == nil {
		data = map[string]any{}
	}
	data["Caller"] = callerOf(r)
	data["Now"] = s.Now()
	var buf strings.Builder
	if err := t.ExecuteTemplate(&buf, "layout.html", data); err != nil {
		s.Log.Error("console page failed", "page", name, "err", err)
		s.problem(w, r, fencegate.Wrap(err, fencegate.CodeInternal, "console page failed"))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// consoleError answers err as a console page, with the status and code the
// API would answer (StatusOf).
func (s *Server) consoleError(w http.ResponseWriter, r *http.Request, err error) {
	code := fencegate.ErrorCode(err)
	status := StatusOf(code)
	if status >= 500 {
		s.Log.Error("console request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	} else {
		s.Log.Info("console request refused", "method", r.Method, "path", r.URL.Path, "code", code, "detail", fencegate.ErrorMessage(err))
	}
	s.render(w, r, status, "error", map[string]any{"Code": code, "Status": status, "Detail": fencegate.ErrorMessage(err)})
}

// consoleFuncs are the template helpers of the console pages.
var consoleFuncs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"ms": func(ms int64) string {
		if ms == 0 {
			return "—"
		}
		return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000Z")
	},
	// p escapes one path segment (html/template keeps a URL path's "%XX"
	// as is, so an escaped "/" stays inside the segment). A value in a
	// URL's query needs no helper: html/template escapes it exactly once
	// (url.QueryEscape before it would be escaped twice).
	"p": url.PathEscape,
}
