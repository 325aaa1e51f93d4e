//! `--model-namespacing`: a model name found in more than one repository is served once per
//! repository, each under a key that names its repository (`name@/path/to/repository`). A request
//! cannot name such a model (the protocols carry no namespace, as in tritonserver); an ensemble reaches
//! the one of its own repository, and loading or unloading the plain name acts on all of them.
//!
//! A model name never contains '/', and a repository path is absolute, so `@/` always marks where a
//! key's repository starts and no folder name can be mistaken for a key.

use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::ModelConfig;
use std::path::Path;

/// The key of model `name` in repository `repo` when the name is in several repositories.
pub fn qualify(name: &str, repo: &Path) -> String {
    format!("{name}@{}", repo.display())
}

/// `repo` as an absolute path (a namespaced key names its repository by one).
pub(super) fn absolute(repo: &Path) -> std::path::PathBuf {
    std::path::absolute(repo).unwrap_or_else(|_| repo.to_path_buf())
}

/// The key model `name` would have in the repository holding the model folder `model_dir`.
pub fn sibling_key(name: &str, model_dir: &Path) -> Option<String> {
    Some(qualify(name, &absolute(model_dir.parent()?)))
}

/// The model name of a key (the key itself when it names no repository).
pub fn plain(key: &str) -> &str {
    split(key).0
}

/// A key's model name and, for a namespaced key, its repository.
pub fn split(key: &str) -> (&str, Option<&str>) {
    match key.find("@/") {
        Some(i) if !key[..i].contains('/') => (&key[..i], Some(&key[i + 1..])),
        _ => (key, None),
    }
}

/// Whether `key` is one of model `name`'s namespaced keys.
pub fn is_key_of(key: &str, name: &str) -> bool {
    matches!(split(key), (n, Some(_)) if n == name)
}

/// An ensemble's configuration whose steps name the models of its own repository (the one holding
/// `model_dir`) where such a key `exists`; other steps keep their names.
pub fn steps_in_namespace(cfg: &ModelConfig, model_dir: &Path, exists: impl Fn(&str) -> bool) -> ModelConfig {
    let mut cfg = cfg.clone();
    if let Some(SchedulingChoice::EnsembleScheduling(ensemble)) = cfg.scheduling_choice.as_mut() {
        for step in ensemble.step.iter_mut() {
            if let Some(key) = sibling_key(&step.model_name, model_dir).filter(|k| exists(k)) {
                step.model_name = key;
            }
        }
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_repository() {
        let k = qualify("a@b", Path::new("/srv/r1"));
        assert_eq!(k, "a@b@/srv/r1");
        assert_eq!(split(&k), ("a@b", Some("/srv/r1")));
        assert_eq!(plain("plain"), "plain");
        assert_eq!(plain("x@y"), "x@y");
        assert!(is_key_of(&k, "a@b") && !is_key_of("a@b", "a@b") && !is_key_of(&k, "a"));
    }
}
