//! The public surface of the library (`treadle-session`, `treadle-event`, `treadle-hook`),
//! listed from the source and held equal to docs/library-api.txt, so that a change to the
//! surface shows in review as a change to that file.
//!
//! The list is made with `syn` (each crate's module tree, walked from its `lib.rs`) and
//! `prettyplease`: every item reachable from outside under a `pub` path (through `pub mod`
//! chains and `pub use` re-exports), with its fields, variants and signatures, bodies and
//! doc comments left out; the `pub` methods of its inherent impls and the traits it
//! implements (by hand or derived). Items behind a `cfg` keep their `#[cfg(...)]`.
//! `TREADLE_BLESS_API=1 cargo test -p treadle-session --test session public_api` rewrites
//! the file after an intended change (and the change then needs a CHANGELOG.md entry).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::{Attribute, ImplItem, Item, UseTree, Visibility};

/// One module of a crate: its path (`treadle_session::journal`), whether every module on
/// the way to it is `pub`, and its items.
struct Module {
    path: String,
    public: bool,
    items: Vec<Item>,
}

/// Where an item is defined: its module's path and its index among the module's items.
type Def = (String, usize);

/// A crate's modules, by path.
struct Crate {
    name: String,
    modules: BTreeMap<String, Module>,
}

fn cfg_excluded(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = quote_string(&a.meta);
            text.contains("test") || text.contains("doctest")
        }
    })
}

fn quote_string(tokens: &impl quote::ToTokens) -> String {
    tokens.to_token_stream().to_string()
}

fn is_pub(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

fn load_module(krate: &mut Crate, path: String, public: bool, file: &Path, dir: &Path) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    add_items(krate, path, public, parsed.items, dir);
}

fn add_items(krate: &mut Crate, path: String, public: bool, items: Vec<Item>, dir: &Path) {
    let mut kept = Vec::new();
    for item in items {
        if let Item::Mod(m) = &item {
            if cfg_excluded(&m.attrs) {
                continue;
            }
            let name = m.ident.to_string();
            let child = format!("{path}::{name}");
            let child_public = public && is_pub(&m.vis);
            match &m.content {
                Some((_, inner)) => {
                    add_items(krate, child, child_public, inner.clone(), &dir.join(&name))
                }
                None => {
                    let flat = dir.join(format!("{name}.rs"));
                    let (file, sub) = if flat.exists() {
                        (flat, dir.join(&name))
                    } else {
                        (dir.join(&name).join("mod.rs"), dir.join(&name))
                    };
                    load_module(krate, child, child_public, &file, &sub);
                }
            }
        }
        kept.push(item);
    }
    krate.modules.insert(
        path.clone(),
        Module {
            path,
            public,
            items: kept,
        },
    );
}

fn load_crate(name: &str, dir: &Path) -> Crate {
    let mut krate = Crate {
        name: name.to_owned(),
        modules: BTreeMap::new(),
    };
    let src = dir.join("src");
    load_module(&mut krate, name.to_owned(), true, &src.join("lib.rs"), &src);
    krate
}

/// The name an item defines, for the kinds that can be named from outside.
fn item_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Struct(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Trait(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Const(i) => &i.ident,
        Item::Static(i) => &i.ident,
        Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Struct(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Const(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        _ => &[],
    }
}

fn item_vis(item: &Item) -> Option<&Visibility> {
    Some(match item {
        Item::Struct(i) => &i.vis,
        Item::Enum(i) => &i.vis,
        Item::Fn(i) => &i.vis,
        Item::Trait(i) => &i.vis,
        Item::Type(i) => &i.vis,
        Item::Const(i) => &i.vis,
        Item::Static(i) => &i.vis,
        Item::Use(i) => &i.vis,
        _ => return None,
    })
}

/// The (name, path segments) pairs a `use` tree brings in.
fn use_pairs(tree: &UseTree, prefix: Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        UseTree::Path(p) => {
            let mut next = prefix;
            next.push(p.ident.to_string());
            use_pairs(&p.tree, next, out);
        }
        UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut full = prefix;
            if name == "self" {
                let last = full.last().cloned().unwrap_or_default();
                out.push((last, full));
            } else {
                full.push(name.clone());
                out.push((name, full));
            }
        }
        UseTree::Rename(r) => {
            let mut full = prefix;
            full.push(r.ident.to_string());
            out.push((r.rename.to_string(), full));
        }
        UseTree::Group(g) => {
            for t in &g.items {
                use_pairs(t, prefix.clone(), out);
            }
        }
        UseTree::Glob(_) => panic!("glob re-exports are not listed; name the items"),
    }
}

/// Where something named `name` in module `module` is defined: (module path, item index),
/// or `Err(path)` for something outside the crate.
fn resolve(
    krate: &Crate,
    module: &str,
    name: &str,
    depth: usize,
) -> Result<(String, usize), String> {
    assert!(depth < 16, "use cycle at {module}::{name}");
    let Some(m) = krate.modules.get(module) else {
        return Err(format!("{module}::{name}"));
    };
    if let Some(index) = m
        .items
        .iter()
        .position(|i| item_name(i).as_deref() == Some(name) && !cfg_excluded(item_attrs(i)))
    {
        return Ok((module.to_owned(), index));
    }
    for item in &m.items {
        let Item::Use(u) = item else { continue };
        if cfg_excluded(&u.attrs) {
            continue;
        }
        let mut pairs = Vec::new();
        use_pairs(&u.tree, Vec::new(), &mut pairs);
        for (local, segments) in pairs {
            if local == name {
                return resolve_path(krate, module, &segments, depth + 1);
            }
        }
    }
    Err(format!("{module}::{name}"))
}

fn resolve_path(
    krate: &Crate,
    module: &str,
    segments: &[String],
    depth: usize,
) -> Result<(String, usize), String> {
    let mut at = module.to_owned();
    let mut rest = segments;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            at = krate.name.clone();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                at = at
                    .rsplit_once("::")
                    .map(|(p, _)| p.to_owned())
                    .unwrap_or(at);
                rest = &rest[1..];
            }
        }
        Some(first) if !krate.modules.contains_key(&format!("{at}::{first}")) => {
            return Err(segments.join("::"));
        }
        _ => {}
    }
    let (last, dirs) = rest.split_last().ok_or_else(|| segments.join("::"))?;
    for dir in dirs {
        at = format!("{at}::{dir}");
    }
    resolve(krate, &at, last, depth)
}

/// Every public path of every item: definition → its public paths; and the re-exports of
/// things outside the crate, as written.
fn public_paths(krate: &Crate) -> (BTreeMap<Def, BTreeSet<String>>, BTreeSet<String>) {
    let mut found: BTreeMap<Def, BTreeSet<String>> = BTreeMap::new();
    let mut external = BTreeSet::new();
    for m in krate.modules.values().filter(|m| m.public) {
        for (index, item) in m.items.iter().enumerate() {
            if cfg_excluded(item_attrs(item)) || !item_vis(item).is_some_and(is_pub) {
                continue;
            }
            if let Item::Use(u) = item {
                let mut pairs = Vec::new();
                use_pairs(&u.tree, Vec::new(), &mut pairs);
                for (name, segments) in pairs {
                    let public = format!("{}::{name}", m.path);
                    match resolve_path(krate, &m.path, &segments, 0) {
                        Ok(def) => {
                            found.entry(def).or_default().insert(public);
                        }
                        Err(outside) => {
                            external.insert(format!("pub use {outside} as {public};"));
                        }
                    }
                }
            } else if let Some(name) = item_name(item) {
                let def = (m.path.clone(), index);
                found
                    .entry(def)
                    .or_default()
                    .insert(format!("{}::{name}", m.path));
            }
        }
    }
    (found, external)
}

/// Attributes that are part of the surface.
fn keep_attrs(attrs: &mut Vec<Attribute>) {
    attrs.retain(|a| {
        ["derive", "non_exhaustive", "deprecated", "cfg", "must_use"]
            .iter()
            .any(|k| a.path().is_ident(k))
    });
}

fn unparse(item: Item) -> String {
    prettyplease::unparse(&syn::File {
        shebang: None,
        frontmatter: None,
        attrs: Vec::new(),
        items: vec![item],
    })
}

/// An item as the surface shows it: no docs, no bodies, no private fields.
fn render(item: &Item) -> String {
    let mut item = item.clone();
    let mut note = "";
    match &mut item {
        Item::Struct(s) => {
            keep_attrs(&mut s.attrs);
            let before = s.fields.len();
            let fields: Vec<syn::Field> = s
                .fields
                .iter()
                .filter(|f| is_pub(&f.vis))
                .cloned()
                .collect();
            if fields.len() < before {
                note = "    // and private fields\n";
            }
            match &mut s.fields {
                syn::Fields::Named(n) => n.named = fields.into_iter().collect(),
                syn::Fields::Unnamed(u) => u.unnamed = fields.into_iter().collect(),
                syn::Fields::Unit => {}
            }
            for f in s.fields.iter_mut() {
                keep_attrs(&mut f.attrs);
            }
        }
        Item::Enum(e) => {
            keep_attrs(&mut e.attrs);
            for v in e.variants.iter_mut() {
                keep_attrs(&mut v.attrs);
                for f in v.fields.iter_mut() {
                    keep_attrs(&mut f.attrs);
                }
            }
        }
        Item::Fn(f) => {
            keep_attrs(&mut f.attrs);
            *f.block = syn::parse_quote!({});
        }
        Item::Trait(t) => {
            keep_attrs(&mut t.attrs);
            for ti in t.items.iter_mut() {
                if let syn::TraitItem::Fn(f) = ti {
                    keep_attrs(&mut f.attrs);
                    f.default = None;
                    f.semi_token = Some(Default::default());
                }
            }
        }
        Item::Type(t) => keep_attrs(&mut t.attrs),
        Item::Const(c) => keep_attrs(&mut c.attrs),
        Item::Static(s) => keep_attrs(&mut s.attrs),
        _ => {}
    }
    let is_struct = matches!(item, Item::Struct(_));
    let text = unparse(item);
    if is_struct {
        // A struct whose fields are all private shows as such, not as a unit struct.
        return match (text.strip_suffix(" {}\n"), text.strip_suffix("}\n")) {
            (Some(open), _) if !note.is_empty() => format!("{open} {{ /* private fields */ }}\n"),
            (None, Some(open)) if !note.is_empty() => format!("{open}{note}}}\n"),
            _ => text,
        };
    }
    text.replace(" {}\n", ";\n")
}

/// The last identifier of an impl's self type (`Journal` of `impl<T> Journal<T>`).
fn self_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// The impls of each definition: inherent `pub` methods, and trait headers.
fn impls(krate: &Crate) -> BTreeMap<(String, usize), Vec<String>> {
    let mut out: BTreeMap<(String, usize), Vec<String>> = BTreeMap::new();
    for m in krate.modules.values() {
        for item in &m.items {
            let Item::Impl(imp) = item else { continue };
            if cfg_excluded(&imp.attrs) {
                continue;
            }
            let Some(name) = self_name(&imp.self_ty) else {
                continue;
            };
            let Ok(def) = resolve(krate, &m.path, &name, 0) else {
                continue;
            };
            let mut imp = imp.clone();
            keep_attrs(&mut imp.attrs);
            if imp.trait_.is_some() {
                imp.items.clear();
                let text = unparse(Item::Impl(imp)).replace(" {}\n", "\n");
                out.entry(def).or_default().push(text);
                continue;
            }
            imp.items.retain(|i| {
                matches!(i, ImplItem::Fn(f) if is_pub(&f.vis))
                    || matches!(i, ImplItem::Const(c) if is_pub(&c.vis))
            });
            if imp.items.is_empty() {
                continue;
            }
            for i in imp.items.iter_mut() {
                match i {
                    ImplItem::Fn(f) => {
                        keep_attrs(&mut f.attrs);
                        f.block = syn::parse_quote!({});
                    }
                    ImplItem::Const(c) => keep_attrs(&mut c.attrs),
                    _ => {}
                }
            }
            out.entry(def)
                .or_default()
                .push(unparse(Item::Impl(imp)).replace(" {}\n", ";\n"));
        }
    }
    for list in out.values_mut() {
        list.sort();
    }
    out
}

fn list_crate(dir: &Path, name: &str) -> String {
    let krate = load_crate(name, dir);
    let (paths, external) = public_paths(&krate);
    let impls = impls(&krate);
    let mut sections = BTreeMap::new();
    for (def, mut names) in paths {
        let item = &krate.modules[&def.0].items[def.1];
        let shortest = names
            .iter()
            .min_by_key(|p| (p.matches("::").count(), (*p).clone()))
            .cloned()
            .unwrap_or_default();
        names.remove(&shortest);
        let mut text = format!("== {shortest}\n");
        if !names.is_empty() {
            let also: Vec<&str> = names.iter().map(String::as_str).collect();
            text.push_str(&format!("   also {}\n", also.join(", ")));
        }
        text.push_str(&render(item));
        for imp in impls.get(&def).into_iter().flatten() {
            text.push_str(imp);
        }
        sections.insert(shortest, text);
    }
    let mut out = format!("# {}\n\n", name.replace('_', "-"));
    for m in krate.modules.values().filter(|m| m.public) {
        out.push_str(&format!("mod {}\n", m.path));
    }
    out.push('\n');
    for line in external {
        out.push_str(&line);
        out.push('\n');
    }
    for text in sections.values() {
        out.push('\n');
        out.push_str(text);
    }
    out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The whole list, as docs/library-api.txt holds it.
fn surface() -> String {
    let root = workspace();
    let mut out = String::from(
        "# The public surface of the library, generated from the source by\n\
         # pkg-session/tests/public_api.rs (TREADLE_BLESS_API=1 rewrites it). A change here\n\
         # is a change to the public API: it needs a CHANGELOG.md entry.\n\n",
    );
    for (dir, name) in [
        ("pkg-session", "treadle_session"),
        ("pkg-event", "treadle_event"),
        ("pkg-hook", "treadle_hook"),
    ] {
        out.push_str(&list_crate(&root.join(dir), name));
        out.push('\n');
    }
    out
}

#[test]
fn the_public_surface_is_the_one_docs_library_api_txt_lists() {
    let file = workspace().join("docs/library-api.txt");
    let now = surface();
    if std::env::var_os("TREADLE_BLESS_API").is_some() {
        std::fs::write(&file, &now).expect("write docs/library-api.txt");
        return;
    }
    let listed = std::fs::read_to_string(&file).unwrap_or_default();
    if listed != now {
        let first = listed
            .lines()
            .zip(now.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(listed.lines().count().min(now.lines().count()));
        let context: Vec<&str> = now.lines().skip(first.saturating_sub(3)).take(8).collect();
        panic!(
            "the public surface changed (first difference at line {}):\n{}\n\nIf intended: \
             TREADLE_BLESS_API=1 cargo test -p treadle-session --test session public_api, \
             and add a CHANGELOG.md entry",
            first + 1,
            context.join("\n")
        );
    }
}

/// The list sees what it claims to: a private module's `pub` item is listed only through a
/// re-export, and a `pub(crate)` item never.
#[test]
fn the_list_holds_re_exports_and_leaves_out_crate_private_items() {
    let list = surface();
    assert!(
        list.contains("== treadle_session::Session\n"),
        "root re-export"
    );
    assert!(
        list.contains("== treadle_session::Journal\n   also treadle_session::journal::Journal\n"),
        "an item of a pub mod, re-exported at the root"
    );
    assert!(
        list.contains("pub struct Journal { /* private fields */ }"),
        "a struct with private fields"
    );
    assert!(!list.contains("GateSubject"), "a type made private");
    assert!(list.contains("pub fn answer("), "an inherent method");
    assert!(
        !list.contains("== treadle_session::session::"),
        "private module path"
    );
    assert!(!list.contains("fn from_parts("), "a pub(crate) method");
}
